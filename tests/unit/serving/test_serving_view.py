"""The Serving view's records and figures: timelines read from a run with preemption, the block grid with
shared blocks, the roofline's roof, the memory bars; builders on hand-made records."""

from __future__ import annotations

import pytest

from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.results import BlockGrid, MemoryBar, Peaks, Row, StepRecord
from inspector.serving.scheduler import Scheduler
from inspector.serving.view import block_grid, memory_bars, throughput, timelines
from inspector.viz import serving as vs
from tests.support.viz_records import tiny_loaded  # noqa: F401


def test_timelines_of_a_run_with_preemption_and_arrivals(tiny_loaded):
    # 12 blocks of 4: the long request cannot keep its blocks beside the others
    sched = Scheduler(tiny_loaded.model, PagedKVCache(tiny_loaded.config, 12, 4), max_batch=5)
    for prompt, n, arrival in [([5, 9, 23, 40, 7], 6, 0), ([11, 3], 8, 0), (list(range(30, 51)), 5, 1),
                               ([100, 101, 102], 4, 3)]:
        sched.add(prompt, n, arrival)
    sched.add([7] * 60, 4)  # past the pool: refused
    sched.step_until_done()
    lines = timelines(sched)
    assert [t.label for t in lines] == ["#0", "#1", "#2", "#3", "#4 (refused)"]
    assert all(len(t.states) == len(sched.records) for t in lines)
    assert set(lines[4].states) == {""}
    assert lines[3].states[:3] == ("", "", "") and lines[3].states[3] != ""
    for t in lines[:4]:
        seq = sched.requests[t.request_id]
        for rec, state in zip(sched.records, t.states):
            if t.request_id in rec.preempted:
                assert state == "preempted"
            elif any(r.request_id == t.request_id for r in rec.rows):
                assert state == next(r.kind for r in rec.rows if r.request_id == t.request_id)
        assert t.states[-1] in ("finished", "decode") and t.generated == len(seq.output_ids)
        finish = next(rec.step for rec in sched.records if t.request_id in rec.finished)
        assert set(t.states[finish + 1:]) <= {"finished"}
    assert any("preempted" in t.states for t in lines)
    one = Scheduler(tiny_loaded.model, PagedKVCache(tiny_loaded.config, 12, 4), max_batch=1)
    one.add([5, 9], 2)
    one.add([11, 3], 2)
    one.step_until_done()
    assert [t.states for t in timelines(one, ["a", "b"])] == [("prefill", "decode", "finished", "finished"),
                                                             ("waiting", "waiting", "prefill", "decode")]
    tokens, rate = throughput(sched.records)
    assert tokens == sum(len(s.output_ids) for s in sched.requests) and rate > 0


def test_block_grid_marks_shared_blocks(tiny_loaded):
    cache = PagedKVCache(tiny_loaded.config, 6, 4)
    cache.add(0)
    cache.reserve(0, 6)
    cache.batch([0]).advance(6)
    cache.fork(0, 1)
    grid = block_grid(cache)
    assert grid.owners == ((0, 1), (0, 1), (), (), (), ()) and grid.used == 2 and grid.shared == 2
    fig = vs.block_grid_figure(grid)
    marker = fig.data[0].marker
    assert list(marker.line.width) == [3, 3, 1, 1, 1, 1] and list(fig.data[0].text)[:3] == ["0,1", "0,1", ""]
    assert "2 of 6 blocks in use" in fig.layout.title.text and "2 shared" in fig.layout.title.text


def test_roofline_figure_draws_the_roof_and_each_forward():
    peaks = Peaks(100.0, 10.0, "float32")
    steps = [StepRecord(0, [Row(0, "prefill", 32)], 2, [0], [], [], {0: 1}, 20.0, 10**9, 10**8, 10.0),
             StepRecord(1, [Row(0, "decode", 1, 32)], 2, [], [], [], {0: 2}, 5.0, 2 * 10**7, 2 * 10**7, 4.0),
             StepRecord(2, [], 0, [], [], [], {}, 0.1)]  # idle: no forward, not drawn
    fig = vs.roofline_figure(steps, peaks)
    roof, prefill, decode, mixed = fig.data
    assert all(y == pytest.approx(min(100.0, 10.0 * x)) for x, y in zip(roof.x, roof.y))
    assert list(prefill.x) == [10.0] and list(prefill.y) == [pytest.approx(100.0)]  # 1 GFLOP in 10 ms
    assert list(decode.x) == [1.0] and list(decode.y) == [pytest.approx(5.0)] and len(mixed.x) == 0
    assert steps[1].gb_per_s == pytest.approx(5.0) and steps[0].kind == "prefill" and steps[2].kind == "idle"
    assert len(vs.roofline_figure(steps, None).data) == 3  # no peaks measured: points only


def test_tokens_and_memory_figures():
    steps = [StepRecord(0, [Row(0, "prefill", 7), Row(1, "decode", 1, 9)], 3, [0], [], [], {0: 1, 1: 2}, 1.0)]
    fig = vs.tokens_figure(steps)
    assert list(fig.data[0].y) == [7] and list(fig.data[1].y) == [1] and list(fig.data[2].y) == [3]
    bars = memory_bars("meta-llama/Llama-3.1-8B", 8192, 8, "bf16", 80 * 2**30)
    assert bars[1].kv_bytes == 4 * bars[0].kv_bytes  # 32 query heads share 8 KV heads
    fig = vs.memory_figure(bars + [MemoryBar("x", 2**30, 2**30)], 80 * 2**30)
    assert list(fig.data[0].x)[2] == 1.0 and fig.layout.shapes[0].x0 == 80
    assert vs.block_grid_figure(BlockGrid(16, ())).data[0].x == ()
