"""`python -m bench.engine --profile fp32|bf16|fp32-rec`: where a decode step's time goes, per torch operation.

Prefills 128 tokens, then profiles n decode steps (torch.profiler, CPU): torch ops grouped by what they do
in a step (weight products, attention's batched products, softmax, copies, ...) in ms per step and share
of the profiled step, what lies outside torch ops (Python), then the top ops. The profiler adds a few
microseconds per op, so compare the shares with the unprofiled step time it prints first.
"""

from __future__ import annotations

import os
import statistics
import time

import torch


GROUPS = {  # torch op -> what it does in a decode step
    "aten::mm": "linear (matmul on weights)", "aten::addmm": "linear (matmul on weights)",
    "aten::bmm": "attention matmuls", "aten::baddbmm": "attention matmuls", "aten::_softmax": "softmax", "aten::masked_fill_": "mask",
    "aten::copy_": "copies (cache writes, casts)", "aten::cat": "cat", "aten::index": "gather",
}


def profile(ours, ids: list[int], n: int = 20) -> None:
    """Where the time of n decode steps of `ours` (a `bench.engine.Ours`, handed in so this module imports
    nothing of bench.engine) after the prompt `ids` goes: torch ops grouped, then the top ops."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    ours.prefill(ids)
    ours.steps(5)
    plain = statistics.median(ours.steps(n))
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        ours.steps(n)
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    groups: dict[str, list[float]] = {}
    for e in events:
        if e.self_cpu_time_total <= 0:
            continue
        g = GROUPS.get(e.key, "other torch ops (elementwise, norms, views, ...)")
        acc = groups.setdefault(g, [0.0, 0])
        acc[0] += e.self_cpu_time_total / 1e3 / n  # ms per step
        acc[1] += e.count / n
    inside = sum(v[0] for v in groups.values())
    print(f"median step unprofiled {plain * 1e3:.1f} ms; profiled {wall / n * 1e3:.1f} ms per step; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}\n")
    print("| where (per decode step, ctx 128) | ms | share of profiled step | op calls |")
    print("|---|---|---|---|")
    for g, (ms, calls) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"| {g} | {ms:.2f} | {ms / (wall / n * 1e3):.0%} | {calls:.0f} |")
    outside = wall / n * 1e3 - inside
    print(f"| outside torch ops (Python, module calls, profiler) | {outside:.2f} | {outside / (wall / n * 1e3):.0%} | |\n")
    print(events.table(sort_by="self_cpu_time_total", row_limit=20))
