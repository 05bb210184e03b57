"""The Serving tab's handlers without a browser, over a tiny model: load / step / play / pause, caps before
model work, one-line errors, the memory calculator; and the figure builders on the records a real run makes."""

from __future__ import annotations

import pytest

from inspector.errors import InputError
from inspector.ui.labs import serving as st
from inspector.ui.labs.serving_memory import MemoryCalculator
from tests.support.lab_context import make_ctx
from tests.support.viz_records import tiny_loaded  # noqa: F401

SAMPLING = (0.0, 0, 1.0, 0.0, 0)  # temperature, top-k, top-p, min-p, seed
REQUESTS = "0 | 4 | The quick brown fox\nHello world\n2 | 3 | Once upon a time"
STATUS, SUMMARY, GRID, TIMELINE, TOKENS, ROOF, TABLE = "status", "summary", "grid", "timeline", "tokens", "roofline", "table"



def load(ctx, text=REQUESTS, max_batch=2, block_size=4, pool=0, n=1, max_new=5, sampling=SAMPLING, sid="s1"):
    return ctx.panels["serving"].load(sid, text, max_batch, block_size, pool, n, False, "", max_new, *sampling)


def test_parse_requests():
    assert st.parse_requests(REQUESTS, 7) == [("The quick brown fox", 4, 0), ("Hello world", 7, 0),
                                              ("Once upon a time", 3, 2)]
    assert st.parse_requests("a | b\n", 5) == [("a | b", 5, 0)]  # not the three-field form: all prompt
    for text, msg in [("", "no requests"), ("\n \n", "no requests"), ("1 | 2 |  ", "request 1 has no prompt"),
                      ("x\n" * 17, "at most 16")]:
        with pytest.raises(InputError, match=msg):
            st.parse_requests(text, 5)


def test_load_step_play_to_the_end(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    out = load(ctx)
    assert 'data-error="0"' in out[STATUS] and "queued 3 sequences" in out[STATUS]
    out = ctx.panels["serving"].step("s1")
    assert "step 0: #0 prefill" in out[STATUS] and "#1 prefill" in out[STATUS]
    assert 'data-steps="1"' in out[SUMMARY] and 'data-tokens="2"' in out[SUMMARY]
    _, state = ctx.panels["serving"].state("s1")
    cache, seqs = state.sched.cache, state.sched.requests
    blocks = sum(-(-len(s.prompt_ids) // 4) for s in seqs[:2])  # each prompt in blocks of 4, nothing shared
    assert state.sched.records[0].blocks_used == blocks
    paged, contiguous = blocks * cache.bytes_per_block, (seqs[0].max_len + seqs[1].max_len) * cache.bytes_per_position
    from inspector.units import format_bytes
    assert f"KV at peak: paged {format_bytes(paged)}" in out[SUMMARY] and format_bytes(contiguous) in out[SUMMARY]
    grid = out[GRID].data[0]
    owners = [t for t in grid.text if t]
    assert set(owners) == {"0", "1"} and "blocks in use" in out[GRID].layout.title.text
    assert [t.name for t in out[TIMELINE].data] == ["waiting", "prefill", "decode", "preempted", "finished"]
    assert list(out[TOKENS].data[0].y) == [sum(len(tiny_loaded.tokenizer.encode(p)) for p in
                                               ("The quick brown fox", "Hello world"))]
    last = None
    for last in ctx.panels["serving"].play("s1"):
        pass
    assert "all done" in last[STATUS]
    assert last[TABLE].count('data-status="finished"') == 3
    _, state = ctx.panels["serving"].state("s1")
    assert [len(s.output_ids) for s in state.sched.requests] == [4, 5, 3]
    roof = last[ROOF]
    assert roof.data[0].name == "roof" and {t.name for t in roof.data[1:]} == {"prefill", "decode", "mixed"}
    assert sum(len(t.x) for t in roof.data[1:]) == len(state.sched.records)
    assert "every request has finished" in ctx.panels["serving"].step("s1")[STATUS]
    # the third request arrives at step 2 and waits for a slot of the batch of 2: #0 finishes at step 3
    timeline = {t.name: sorted(x for x, y in zip(t.x, t.y) if y.startswith("#2")) for t in last[TIMELINE].data}
    assert timeline["waiting"] == [2, 3] and timeline["prefill"] == [4]


def test_pause_stops_play_and_step_continues(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    load(ctx, sid="p")
    run = ctx.panels["serving"].play("p")
    first = next(run)
    assert "step 0" in first[STATUS]
    ctx.panels["serving"].pause("p")
    assert "paused" in next(run)[STATUS]
    assert "step 1" in ctx.panels["serving"].step("p")[STATUS]


def test_parallel_samples_share_the_prompt_blocks_in_the_grid(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    out = load(ctx, text="0 | 3 | The quick brown fox jumps", max_batch=3, n=3, sampling=(1.0, 0, 1.0, 0.0, 4))
    assert "queued 3 sequences" in out[STATUS]
    out = ctx.panels["serving"].step("s1")
    assert "shared" in out[GRID].layout.title.text and "0,1,2" in list(out[GRID].data[0].text)


@pytest.mark.parametrize("kwargs, limits, message", [
    ({"text": ""}, {}, "no requests"),
    ({"n": 3, "max_batch": 2}, {}, "need a max batch of at least 3"),
    ({"sampling": (-1, 0, 1.0, 0.0, 0)}, {}, "temperature"),
    ({"max_new": 500}, {}, "capped at 256"),
    ({"text": "0 | 9 | The quick brown fox"}, {"max_steps": 8}, "capped at 8"),
    ({}, {"max_prompt_tokens": 4, "max_steps": 8}, "the prompt is"),
    ({"text": "0 | 8 | a b c\n0 | 8 | d e f\n0 | 8 | g h"}, {"max_prompt_tokens": 8, "max_steps": 8},
     "the Serving lab allows 16 per visitor"),
    ({"pool": 100_000}, {"max_trace_mb": 1}, "INSPECTOR_MAX_TRACE_MB"),
    ({"block_size": 0}, {}, "block size must be a whole number from 1"),
])
def test_bad_input_is_one_line_before_any_model_work(tiny_loaded, kwargs, limits, message):
    ctx = make_ctx(tiny_loaded, **limits)
    out = load(ctx, **kwargs)
    assert 'data-error="1"' in out[STATUS] and message in out[STATUS] and "\n" not in out[STATUS]
    assert len(ctx.store) == 0 or ctx.panels["serving"].state("s1")[1].sched is None  # nothing was queued


def test_step_or_play_before_load(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    assert "press Load first" in ctx.panels["serving"].step("x")[STATUS]
    assert "press Load first" in list(ctx.panels["serving"].play("x"))[-1][STATUS]
    ctx.panels["serving"].pause("x")  # no error


def test_a_request_past_the_pool_is_refused_alone(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    out = load(ctx, text="0 | 4 | hi\n0 | 30 | The quick brown fox jumps over", pool=4, block_size=4)
    assert "1 refused" in out[STATUS]
    for out in ctx.panels["serving"].play("s1"):
        pass
    assert out[TABLE].count('data-status="finished"') == 1 and "refused: needs" in out[TABLE]


def test_memory_calculator():
    calc = MemoryCalculator(None)  # no model work: no page needed
    out = calc.memory_view("meta-llama/Llama-3.1-8B", 8192, 8, "bf16", 80)
    fig, line = out["figure"], out["line"]
    assert [t.name for t in fig.data] == ["weights", "KV cache"] and len(fig.data[0].y) == 2
    assert "full MHA would need 4.0x as much" in line and "65 requests of 8192 tokens fit in 80 GiB" in line
    out = calc.memory_view("no-such/model", 8192, 8, "bf16", 80)
    assert set(out) == {"line"} and 'data-error="1"' in out["line"] and "no-such/model" in out["line"]
    assert 'data-error="1"' in calc.memory_view("meta-llama/Llama-3.1-8B", 0, 8, "bf16", 80)["line"]


def test_load_during_play_ends_the_old_play(tiny_loaded):
    ctx = make_ctx(tiny_loaded)
    load(ctx, sid="q")
    run = ctx.panels["serving"].play("q")
    assert "step 0" in next(run)[STATUS]
    assert "queued 1 sequence in" in load(ctx, text="hello", sid="q")[STATUS]
    assert list(run) == []  # the old Play stops without stepping the new run
    _, state = ctx.panels["serving"].state("q")
    assert state.sched.records == []


def test_prefix_caching_and_chunked_prefill_in_the_tab(tiny_loaded):
    """Requests sharing a long prefix: the status reports block hits, and every output equals the run
    without sharing and without chunks."""
    shared = "The library opens at nine and closes at eight, every weekday, all year round. "
    text = "\n".join(f"{i} | 4 | {shared}{q}" for i, q in enumerate(["When?", "Where?", "Who?"]))
    outs = []
    for prefix, chunk in [(False, 0), (True, 0), (True, 5)]:
        ctx = make_ctx(tiny_loaded)
        out = ctx.panels["serving"].load("s1", text, 2, 4, 0, 1, False, "", 4, *SAMPLING, prefix_caching=prefix, prefill_chunk=chunk)
        assert 'data-error="0"' in out[STATUS]
        last = None
        for last in ctx.panels["serving"].play("s1"):
            pass
        _, state = ctx.panels["serving"].state("s1")
        outs.append([s.output_ids for s in state.sched.requests])
        stats = state.sched.cache.prefix_stats()
        if prefix:
            assert stats.hits > 0 and stats.tokens_reused > 0
    assert outs[0] == outs[1] == outs[2]
    ctx = make_ctx(tiny_loaded)
    bad = ctx.panels["serving"].load("s1", text, 2, 4, 0, 1, False, "", 4, *SAMPLING, prefill_chunk=-1)
    assert 'data-error="1"' in bad[STATUS] and "prefill chunk must be a whole number from 0 to 100000" in bad[STATUS]


def test_memory_calculator_states_a_mixtures_total_and_active_parameters_and_the_union_curve():
    """For a mixture of experts the calculator names its total and active parameters (the counts the CLI and
    transformers give) and what each costs, and draws the experts a batch of B tokens reads against B."""
    from inspector.serving.experts import count_active_params, expected_experts
    from inspector.serving.memory import count_params, resolve_config

    cfg = resolve_config("Qwen/Qwen3-30B-A3B").config
    out = MemoryCalculator(None).memory_view("Qwen/Qwen3-30B-A3B", 4096, 8, "bf16", 80)
    line = out["line"]
    assert f"{count_params(cfg) / 1e9:.2f} B parameters in all" in line and "30.53 B" in line
    assert f"{count_active_params(cfg) / 1e9:.2f} B active per token" in line and "8 of 128 experts" in line
    curve = out["experts"].data[0]
    assert list(curve.x)[:3] == [1, 2, 4] and curve.y[0] == pytest.approx(8.0)  # one token: exactly its k experts
    assert curve.y[list(curve.x).index(8)] == pytest.approx(expected_experts(128, 8, 8))
    assert all(a < b for a, b in zip(curve.y, curve.y[1:])) and curve.y[-1] < 128
    dense = MemoryCalculator(None).memory_view("meta-llama/Llama-3.1-8B", 8192, 8, "bf16", 80)
    assert "mixture of experts" not in dense["line"] and "dense" in dense["experts"].layout.annotations[0].text
