"""The Speculative view's builders and the tab's handlers without a browser, over a tiny model: start, round,
play/pause, the plain-decode comparison at the end, caps and one-line errors."""

from __future__ import annotations


import pytest

from inspector.speculative.rounds import DraftToken, PlainTiming, RoundRecord, SpecStats
from inspector.viz import speculative as vsp
from tests.support.lab_context import make_ctx, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

SAMPLING = (0.0, 0, 1.0, 0.0, 0)
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"




def a_round(index: int = 0) -> RoundRecord:
    drafts = [DraftToken(5, "␣the", 1.0, 0.9, True), DraftToken(6, "cat", 1.0, 0.1, False),
              DraftToken(7, "sat", 1.0, 0.0, False)]
    return RoundRecord(index, 10, 4, "a", drafts, 1, 8, "dog", 0.7, "corrected", [5, 8], 10, 14, 12, 1.0, 20.0)


def test_builders_show_kept_rejected_discarded_and_the_correction():
    html = vsp.rounds_html([a_round(0), a_round(1)])
    assert 'data-rounds="2"' in html and html.index('data-round="1"') < html.index('data-round="0"')  # newest first
    assert html.count("ii-spec-kept") == 2 + 1 and html.count('class="ii-spec-chip ii-spec-rejected"') == 2
    assert html.count('class="ii-spec-chip ii-spec-discarded"') == 2 and "ii-spec-corrected" in html
    assert "q 1.00 · p 0.90" in html and "1/3 kept, corrected" in html
    fig = vsp.kv_figure([a_round(0)])
    written, kept = fig.data[0], fig.data[1]
    assert list(written.y) == [4] and list(kept.y) == [2] and list(written.base) == [10]  # k+1 written, 2 kept
    stats = SpecStats("ngram", 3)
    stats.add(a_round(0))
    assert 'data-speedup' not in vsp.stats_html(stats) and "not measured yet" in vsp.stats_html(stats)
    stats.plain = PlainTiming(2, 0.2)  # 10 tokens/s plain; the round made 2 tokens in 21 ms
    assert stats.speedup == pytest.approx((2 / 0.021) / 10)
    assert f'data-speedup="{stats.speedup:.4f}"' in vsp.stats_html(stats)
    assert 'data-rounds="0"' in vsp.stats_html(None) and 'data-rounds="0"' in vsp.rounds_html([])


def test_start_round_play_to_the_end_with_the_plain_comparison(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    out = ctx.panels["speculative"].start(sid, "ngram", 1, 3, PROMPT, False, "", 12, *SAMPLING)
    assert 'data-error="0"' in status(out) and "prefill done" in status(out) and 'data-generated="1"' in out["text"]
    out = ctx.panels["speculative"].round(sid)
    assert "round 1: kept" in status(out) and 'data-rounds="1"' in out["rounds"] and 'data-rounds="1"' in out["stats"]
    outs = list(ctx.panels["speculative"].play(sid))
    last = outs[-1]
    assert 'data-finished="max_tokens"' in last["text"] and 'data-generated="12"' in last["text"]
    assert "data-speedup=" in last["stats"] and "finished (max_tokens)" in status(last)
    run = ctx.store.get(sid).labs["speculative"].run
    assert run.stats.plain is not None and run.stats.plain.tokens == run.stats.tokens == 11
    out = ctx.panels["speculative"].round(sid)
    assert 'data-error="1"' in status(out) and "press Start to begin again" in status(out)


def test_pause_stops_play_after_the_current_round(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    ctx.panels["speculative"].start(sid, "early-exit", 1, 1, PROMPT, False, "", 40, *SAMPLING)
    gen = ctx.panels["speculative"].play(sid)
    first = next(gen)
    assert "playing" in status(first)
    busy = ctx.panels["speculative"].round(sid)
    assert 'data-error="1"' in status(busy) and "busy" in status(busy)
    ctx.panels["speculative"].pause(sid)
    rest = list(gen)
    assert "paused after round" in status(rest[-1])
    assert "round" in status(ctx.panels["speculative"].round(sid))  # unlocked again


@pytest.mark.parametrize("args, message", [
    (("ngram", 1, 0), "draft length k must be a whole number from 1 to 16, got 0"),
    (("ngram", 1, 400), "draft length k must be a whole number from 1 to 16, got 400"),  # refused, not clamped
    (("ngram", 1, None), "draft length k is empty"),
    (("medusa", 1, 3), "unknown drafter 'medusa'"),
    (("early-exit", 5, 3), "early-exit layer L must be a whole number from 1 to 1, got 5"),
    (("early-exit", float("nan"), 3), "early-exit layer L must be a whole number from 1 to 1, got nan"),
    (("ngram", 1, "x"), "draft length k must be a whole number from 1 to 16, got 'x'"),
])
def test_bad_controls_are_one_line(tiny_loaded, args, message):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    out = ctx.panels["speculative"].start(ctx.store.new_id(), *args, PROMPT, False, "", 8, *SAMPLING)
    assert 'data-error="1"' in status(out) and message in status(out) and "\n" not in status(out)


def test_caps_before_model_work(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded, max_steps=5)
    sid = ctx.store.new_id()
    assert "INSPECTOR_MAX_STEPS" in status(ctx.panels["speculative"].start(sid, "ngram", 1, 3, PROMPT, False, "", 6, *SAMPLING))
    assert "prompt is empty" in status(ctx.panels["speculative"].start(sid, "ngram", 1, 3, "  ", False, "", 4, *SAMPLING))
    assert "temperature" in status(ctx.panels["speculative"].start(sid, "ngram", 1, 3, PROMPT, False, "", 4, -1, 0, 1.0, 0.0, 0))
    assert "press Start first" in status(ctx.panels["speculative"].round(sid))
    assert "press Start first" in status(list(ctx.panels["speculative"].play(sid))[-1])
