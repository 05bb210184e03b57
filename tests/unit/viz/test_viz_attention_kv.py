"""Attention and KV-cache builders on records and on-demand attention from a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.viz import attention as va
from inspector.viz import kvcache as vk
from inspector.viz.common import MAX_TICKS
from tests.support.viz_records import STEPS, tiny_loaded, tiny_run  # noqa: F401


def test_prefill_pattern_is_causal_with_token_labels(tiny_run):
    s = tiny_run
    pat = s.attention_pattern(0, 1, 3)
    n = len(s.prompt_ids)
    fig = va.pattern_heatmap(pat, s.token_pieces(), 0, 1, 3, kv_head=1)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (n, n)
    assert np.isnan(z[np.triu_indices(n, 1)]).all()  # future keys blank
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-4)
    assert "Layer 1 head 3 (KV head 1)" in fig.layout.title.text
    assert len(fig.layout.xaxis.ticktext) == n


def test_decode_row_over_whole_cache(tiny_run):
    s = tiny_run
    row = s.attention_row(STEPS, 0, 0)
    n_keys = len(s.prompt_ids) + STEPS
    fig = va.row_bars(row, s.token_pieces(), len(s.prompt_ids), n_keys - 1, 0, 0, 0)
    assert len(fig.data[0].y) == n_keys
    assert f"over {n_keys} cached keys" in fig.layout.title.text
    colors = fig.data[0].marker.color
    assert colors.count("#f97316") == 1  # the most-attended key highlighted


def test_overview_is_one_uint8_image(tiny_run):
    import base64
    import html
    import io
    import json
    import re

    from PIL import Image

    s = tiny_run
    cfg = s.config
    rows = s.attention_overview(STEPS)
    n_rows, n_keys = cfg.num_hidden_layers * cfg.num_attention_heads, rows.shape[2]
    out = va.overview_html(rows, s.token_pieces(), cfg.n_rep, 9, layer=1, head=2)
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', out)
    assert len(pngs) == 1  # never one subplot per head
    image = Image.open(io.BytesIO(base64.b64decode(pngs[0])))
    assert image.size == (n_keys, n_rows)  # one pixel per (layer·head, key) cell
    z = np.frombuffer(base64.b64decode(re.search(r'data-z="([^"]+)"', out).group(1)), "<f4").reshape(n_rows, n_keys)
    np.testing.assert_array_equal(z, rows.reshape(n_rows, n_keys).astype("<f4"))  # hover: the weights, 0 to 1
    assert 'data-what="attention weight"' in out and "weight×255" not in out
    expected = np.round(rows.reshape(n_rows, n_keys) * 255).astype(np.uint8)  # colors: weights quantised to uint8
    assert image.mode == "P"  # a palette image: one byte per cell to compress
    pixels = np.asarray(image.convert("RGB"))  # (rows, keys, 3): the colors the page shows
    np.testing.assert_array_equal(pixels, va.BLUES_LUT[expected])
    assert tuple(va.BLUES_LUT[0]) == (247, 251, 255) and tuple(va.BLUES_LUT[255]) == (8, 48, 107)  # light = 0
    row_names = json.loads(html.unescape(re.search(r"data-rows='([^']+)'", out).group(1)))
    assert len(row_names) == n_rows and row_names[2] == "L0·H2·kv1"  # tiny model: 2 query heads per KV head
    assert row_names[-1] == f"L{cfg.num_hidden_layers - 1}·H{cfg.num_attention_heads - 1}·kv{cfg.num_key_value_heads - 1}"
    labels = json.loads(html.unescape(re.search(r"data-cols='([^']+)'", out).group(1)))
    assert len(labels) == n_keys and labels[0].startswith("key 0:")
    selected = re.search(r'class="ii-hm-row" style="top:([\d.]+)%', out)  # layer 1, head 2 outlined
    assert float(selected.group(1)) == pytest.approx((1 * cfg.num_attention_heads + 2) * 100 / n_rows, abs=1e-3)
    assert "query at position 9" in out

def test_kv_groups_show_shared_heads(tiny_loaded):
    cfg = tiny_loaded.config
    html = va.kv_groups_html(cfg.num_attention_heads, cfg.num_key_value_heads, head=3)
    assert html.count("ii-group\"") == cfg.num_key_value_heads
    assert html.count("ii-qhead") == cfg.num_attention_heads
    assert "ii-qhead ii-selected\">q3" in html


def test_kv_bytes_equal_formula(tiny_run):
    s = tiny_run
    cfg = s.config
    for rec in (s.records[0], s.records[-1]):
        f = vk.formula(rec.kv)
        tokens = rec.start_pos + rec.n_new
        assert f["tokens"] == tokens
        expected = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4 * tokens  # fp32
        assert f["total"] == f["measured"] == expected
    html = vk.summary_html(s.records[-1].kv, 1_000_000, "float32")
    assert f'data-entries="{len(s.prompt_ids) + STEPS}"' in html
    assert f"× {cfg.num_key_value_heads} KV heads × {cfg.head_dim} head_dim × 4 bytes/elem" in html


def test_kv_layer_bars_and_growth(tiny_run):
    s = tiny_run
    bars = vk.layer_bars(s.records[-1].kv)
    assert [t.name for t in bars.data] == ["K bytes", "V bytes"]
    assert len(bars.data[0].y) == s.config.num_hidden_layers
    growth = vk.growth_chart(s.records, weight_bytes=10**6)
    y = list(growth.data[0].y)
    assert len(y) == STEPS + 1
    per_token = vk.formula(s.records[-1].kv)["per_token"]
    assert np.allclose(np.diff(y), per_token)  # each decode step adds one entry per layer
    assert y[0] == per_token * len(s.prompt_ids)
    assert len(growth.layout.shapes) == 1  # the prefill/decode boundary


def test_recompute_caption():
    assert "without the cache" in vk.recompute_html(5.0, None, 10)
    html = vk.recompute_html(5.0, 20.0, 10)
    assert "4.0× slower" in html and "10 tokens" in html


def test_a_long_decode_row_draws_every_weight_without_one_bar_per_key():
    n_keys, n_prompt = va.MAX_BARS + 100, va.MAX_BARS + 90
    row = np.random.default_rng(0).random(n_keys).astype(np.float32)
    row /= row.sum()
    pieces = [f"t{k}" for k in range(n_keys)]
    fig = va.row_bars(row, pieces, n_prompt, n_keys - 1, 0, 0, 0)
    assert all(t.type == "scatter" for t in fig.data)  # no bar trace: no SVG path per key
    lines, top = fig.data[:2], fig.data[2]
    assert [t.fill for t in lines] == ["tozeroy", "tozeroy"] and [t.line.color for t in lines] == ["#3b82f6", "#10b981"]
    np.testing.assert_array_equal(np.concatenate([t.y for t in lines]), row)  # every weight, prompt then generated
    np.testing.assert_array_equal(np.concatenate([t.x for t in lines]), np.arange(n_keys))
    assert list(lines[0].customdata) + list(lines[1].customdata) == va._labels(pieces, n_keys)  # hover names each key
    k = int(np.argmax(row))  # the most-attended key: an orange line from 0 to its weight, drawn last
    assert list(top.x) == [k, k] and list(top.y) == [0.0, float(row[k])] and top.line.color == "#f97316"
    assert f"over {n_keys} cached keys" in fig.layout.title.text and not fig.layout.showlegend


def test_a_decode_rows_key_axis_keeps_its_range_for_a_tick_stride():
    """The key axis ends less than one tick stride past the last key, at a multiple of the stride: a row one key
    longer (the next Step) keeps the range and the ticks, so the page does not measure the rotated labels again."""
    rng = np.random.default_rng(1)
    pieces = [f"t{k}" for k in range(4000)]

    def axis(n_keys: int):
        row = rng.random(n_keys).astype(np.float32)
        return va.row_bars(row / row.sum(), pieces, min(n_keys, 2840), n_keys - 1, 0, 0, 0).layout.xaxis

    for n_keys in (9, MAX_TICKS):  # one tick per key: the axis is the keys' own, as plotly draws bars
        assert list(axis(n_keys).range) == [-0.5, n_keys - 0.5] and len(axis(n_keys).tickvals) == n_keys
    for n_keys in (100, va.MAX_BARS + 3, 2842):
        x = axis(n_keys)
        stride = x.tickvals[1] - x.tickvals[0]
        assert x.range[0] == -0.5 and n_keys - 0.5 <= x.range[1] < n_keys - 0.5 + stride  # every key, < 1 stride more
        assert (x.range[1] + 0.5) % stride == 0
    grown = [axis(n) for n in range(2850, 2860)]  # ten Steps at long context: one new range at most
    assert len({tuple(x.range) for x in grown}) <= 2 and len({tuple(x.tickvals) for x in grown}) <= 2
    assert all(x.range[1] >= n - 0.5 for n, x in zip(range(2850, 2860), grown))


def causal_pattern(n: int, seed: int = 0) -> np.ndarray:
    """A random causal softmax pattern (n, n): each query's weights over keys 0..i add up to 1."""
    scores = np.random.default_rng(seed).normal(size=(n, n)).astype(np.float32)
    scores[np.triu_indices(n, 1)] = -np.inf
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_a_long_prefill_pattern_is_drawn_in_blocks_of_its_largest_weights():
    n = 2840
    pat = causal_pattern(n)
    fig = va.pattern_heatmap(pat, [f"t{i}" for i in range(n)], 0, 2, 1, kv_head=0)
    block = -(-n // va.MAX_PATTERN_SIDE)  # 10 positions a side
    z = np.asarray(fig.data[0].z, dtype=float)
    side = -(-n // block)
    assert z.shape == (side, side) and side <= va.MAX_PATTERN_SIDE
    # each block shows the largest weight of its cells, future keys never count
    for bq, bk in ((0, 0), (5, 3), (side - 1, side - 1), (side - 1, 0), (100, 100)):
        cells = pat[bq * block:(bq + 1) * block, bk * block:(bk + 1) * block].copy()
        q = np.arange(bq * block, min(n, (bq + 1) * block))[:, None]
        cells[np.arange(bk * block, bk * block + cells.shape[1])[None, :] > q] = np.nan
        assert z[bq, bk] == pytest.approx(np.nanmax(cells), rel=1e-6)
    assert np.isnan(z[np.triu_indices(side, 1)]).all()  # a block of future keys only stays blank
    # hover and title name the blocks; the axes' categories are the blocks' position ranges
    assert fig.data[0].x[1] == f"{block}–{2 * block - 1}" and fig.data[0].x[-1] == f"{(side - 1) * block}–{n - 1}"
    assert "largest weight in the block" in fig.data[0].hovertemplate
    assert f"blocks of {block}×{block} positions" in fig.layout.title.text.replace("<br>", " ")
    assert fig.layout.xaxis.ticktext[0] == "0:t0" and len(fig.layout.xaxis.ticktext) <= 24
    # what the page receives stays small: the cell-per-pair figure was about 50 MB at this length
    assert len(fig.to_json(validate=False)) < 2_000_000


def test_a_short_prefill_pattern_keeps_one_cell_per_pair():
    n = va.MAX_PATTERN_SIDE
    fig = va.pattern_heatmap(causal_pattern(n), [f"t{i}" for i in range(n)], 0, 0, 0, kv_head=0)
    assert np.asarray(fig.data[0].z).shape == (n, n)
    assert "blocks" not in fig.layout.title.text and "weight %{z:.3f}" in fig.data[0].hovertemplate


def test_block_max_ignores_blank_cells():
    z = np.array([[1, np.nan, np.nan], [2, 3, np.nan], [4, 5, 6]], dtype=np.float32)
    np.testing.assert_array_equal(va.block_max(z, 2), np.array([[3, np.nan], [5, 6]], dtype=np.float32))
