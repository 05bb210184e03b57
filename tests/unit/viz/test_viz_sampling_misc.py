"""Sampling, timing and inventory builders on records from a tiny model."""

from __future__ import annotations

import re

from inspector.engine.config import SamplingParams
from inspector.viz import inventory as vi
from inspector.viz import sampling as vs
from inspector.viz import timing as vt
from tests.support.viz_records import STEPS, tiny_loaded, tiny_run  # noqa: F401


def test_sampling_bars_highlight_the_chosen_token(tiny_run):
    rec = tiny_run.records[-1]
    sample = rec.sample
    assert sample.token_id == tiny_run.generated_ids[-1]
    fig = vs.sampling_bars(sample)
    raw, temp, final = fig.data
    assert raw.name == "raw softmax" and "temperature 0.8" in temp.name
    colors = list(final.marker.color)
    chosen_idx = [i for i, c in enumerate(sample.candidates[: len(colors)]) if c.id == sample.token_id]
    assert colors.count("#f97316") == 1 and colors.index("#f97316") == chosen_idx[0]
    assert f"(id {sample.token_id})" in fig.layout.title.text
    assert any(a.text == "chosen" for a in fig.layout.annotations)


def test_sampling_bars_grey_tokens_removed_by_top_k(tiny_run):
    sample = tiny_run.records[-1].sample  # top-k 5
    fig = vs.sampling_bars(sample)
    final = fig.data[2]
    removed = [bool(vs.removed_by(c)) for c in sample.candidates[:20]]
    assert sum(removed) == len(removed) - 5
    assert all(final.marker.color[i] == "#d1d5db" for i, r in enumerate(removed) if r)
    assert all(final.y[i] == 0 for i, r in enumerate(removed) if r)


def test_preview_changes_distribution_and_names_the_pick(tiny_run):
    greedy = tiny_run.preview_sample(SamplingParams(temperature=0.0))
    hot = tiny_run.preview_sample(SamplingParams(temperature=2.0, seed=3))
    f1, f2 = vs.sampling_bars(greedy, preview=True), vs.sampling_bars(hot, preview=True)
    assert list(f1.data[1].y) != list(f2.data[1].y)
    info = vs.sampling_info_html(hot, STEPS, preview_of=tiny_run.generated_ids[-1])
    assert f'data-id="{hot.token_id}"' in info and "same seed would pick" in info
    assert "temperature 2" in info and "survive" in info


def test_sampling_info_step(tiny_run):
    s = tiny_run.records[-1].sample
    html = vs.sampling_info_html(s, STEPS)
    assert f"Step {STEPS} chose" in html
    assert re.search(r'id="sampling-survivors">5<', html)


def test_timing_stats_and_chart(tiny_run):
    recs = tiny_run.records
    st = vt.timing_stats(recs)
    assert st["ttft_ms"] == recs[0].tokenize_ms + recs[0].forward_ms + recs[0].sample_ms
    assert st["last_tpot_ms"] == recs[-1].forward_ms + recs[-1].sample_ms
    fig = vt.timing_chart(recs)
    assert len(fig.data[0].x) == STEPS + 1
    assert fig.data[0].marker.color[0] != fig.data[0].marker.color[1]  # prefill vs decode
    assert "TTFT" in fig.layout.title.text
    assert vt.timing_stats([])["ttft_ms"] is None


def test_inventory_table_lists_every_tensor_with_totals(tiny_loaded):
    from inspector.models.inventory import build_inventory

    inv = build_inventory(tiny_loaded)
    html = vi.inventory_html(inv.entries, tied=True, layer=1)
    body = html.split("<tbody>")[-1]
    assert body.count("<tr") == len(inv.entries)
    assert f'id="inventory-count">{len(inv.entries)}<' in html
    assert "tied" in html
    layer1 = [e for e in inv.entries if vi.layer_of(e.name) == 1]
    assert body.count('class="ii-hit"') == len(layer1) > 0
    totals = vi.group_totals(inv.entries)
    assert sum(g["params"] for g in totals.values()) == inv.params
