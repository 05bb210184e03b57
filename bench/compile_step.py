"""`python -m bench.engine --compile`: is `torch.compile` of the decode step worth shipping as an opt-in?

The bar: the same greedy ids as eager and at least `WORTH` x the eager step, every trace point kept. This
measures the strongest form that keeps the engine's code as it is: `torch.compile(model.forward,
dynamic=True)` over whole decode steps without a recorder (one graph for all 30 layers; the KV cache's
growing length becomes a symbolic size). It prints the compile time (the first three steps), whether 32
greedy ids equal eager's, and the eager and compiled per-step times, taking turns in short chunks round
after round (medians and the spread of the per-round ratios).

Measured before (2 shared cores, load 5-11, 1 thread, CPU time): the whole forward compiled ran fp32 steps
1.21x eager (34.3 -> 28.3 ms, torch 2.13) after a compile of 684 s, which a cache crossing its allocation
step (every 256 positions) repeats; with a recorder, every trace point is Python the graph must keep.
Compiling only each block's math between the KV cache write and attention (two pure functions shared by
all layers, the trace points as their outputs; 33-83 s to compile) was slower than eager: fp32 36.0 vs
33.6 ms (2.13), bf16 23.9 vs 21.5 ms (2.15): a compiled call costs about 11 us before any work, and a
block's element-wise work that it fuses is about that much. So `--compile` is not offered by the engine;
this bench keeps the measurement for a quieter machine or a later torch.
"""

from __future__ import annotations

import statistics
import time

import torch

WORTH = 1.2  # compiled / eager step speed required to offer compile


def _run(loaded, ids: list[int], forward, steps: int) -> tuple[list[int], list[float]]:
    """Greedy ids and per-step seconds of `steps` decode steps after an eager prefill of `ids`."""
    from inspector.engine import steps as engine

    model = loaded.model
    cache = engine.new_cache(model)
    model.forward = model.__class__.forward.__get__(model)  # eager prefill
    token = int(engine.prefill(model, ids, cache).argmax())
    model.forward = forward
    out, times = [], []
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            token = int(engine.decode_step(model, token, cache).argmax())
            times.append(time.perf_counter() - t0)
            out.append(token)
    finally:
        del model.forward  # back to the class's forward
    return out, times


def print_compile_table(loaded, ids: list[int], rounds: int, chunk: int) -> None:
    model = loaded.model
    eager = model.__class__.forward.__get__(model)
    compiled = torch.compile(eager, dynamic=True)
    t0 = time.perf_counter()
    _run(loaded, ids, compiled, 3)
    compile_s = time.perf_counter() - t0
    same = _run(loaded, ids, eager, 32)[0] == _run(loaded, ids, compiled, 32)[0]
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    ratios = []
    for _ in range(rounds):
        per = {name: _run(loaded, ids, fwd, chunk)[1] for name, fwd in (("eager", eager), ("compiled", compiled))}
        for name, ts in per.items():
            times[name] += ts
        ratios.append(statistics.median(per["eager"]) / statistics.median(per["compiled"]))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    ratio = med["eager"] / med["compiled"]
    print(f"\ntorch.compile of the whole decode forward ({loaded.dtype}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads): compile + 3 steps {compile_s:.0f} s; 32 greedy ids equal eager: {same}\n")
    print("| decode step, ctx %d | ms (median) | vs eager (per-round spread) |" % len(ids))
    print("|---|---|---|")
    print(f"| eager | {med['eager'] * 1e3:.2f} | 1.00x |")
    print(f"| compiled | {med['compiled'] * 1e3:.2f} | {ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    verdict = "meets" if same and ratio >= WORTH else "misses"
    print(f"\ncompile {verdict} the step bar in this run (same ids and >= {WORTH}x); the engine does not offer it: "
          f"a {compile_s:.0f} s compile, repeated each time the KV cache grows past its allocation, and "
          "every recorded trace point kept as Python (see bench/compile_step.py)")
