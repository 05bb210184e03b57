"""The per-operation table of `python -m bench.engine --ops`: a decode step's time per operation.

For fp32 and bf16 on the same model: prefill a `ctx`-token prompt, then time `steps` decode steps with
`inspector.engine.optiming.OpTimer` (a recorder noting the time at each trace point) and the greedy
choice of the token (sampling); per operation the median over steps of its time summed over the layers,
its share of the step, the bytes it reads (weights, K/V, activations), GB/s, GFLOP/s, and the GB/s against the
machine's measured read bandwidth (the Serving lab's roofline peaks, cached beside the model). The two
dtypes' columns side by side show where a bf16 step's time goes that its halved weights do not save.
"""

from __future__ import annotations

import statistics
import time

import torch

from inspector.engine import steps as engine
from inspector.engine.optiming import OpTimer, op_table, totals
from inspector.serving.roofline import cached_peaks, peaks_directory


def step_ops(loaded, ids: list[int], steps: int) -> dict[str, list[tuple[float, int, int]]]:
    """op -> [(seconds, bytes read, FLOPs)] per decode step after prefilling `ids`."""
    model, cfg = loaded.model, loaded.config
    elem = next(model.parameters()).element_size()
    cache = engine.new_cache(model)
    token = int(engine.prefill(model, ids, cache).argmax())
    out: dict[str, list[tuple[float, int]]] = {}
    for _ in range(steps + 2):  # two warm-up steps
        timer = OpTimer(loaded.device)
        context = cache.length
        timer.start()
        logits = engine.decode_step(model, token, cache, timer)
        t0 = time.perf_counter()
        token = int(logits.argmax())
        sampling = time.perf_counter() - t0
        for row in totals(op_table(cfg, timer, 1, context, elem, sampling)):
            out.setdefault(row.op, []).append((row.seconds, row.bytes_read, row.flops))
    return {op: v[2:] for op, v in out.items()}


def print_ops_table(fp32, bf16, ids: list[int], steps: int = 20) -> None:
    runs = {"fp32": step_ops(fp32, ids, steps), "bf16": step_ops(bf16, ids, steps)}
    peaks = {name: cached_peaks(peaks_directory(m.weights_path), m.dtype) for name, m in (("fp32", fp32), ("bf16", bf16))}
    med = statistics.median
    step_ms = {k: sum(med(s for s, _, _ in v) for v in r.values()) * 1e3 for k, r in runs.items()}
    print(f"\nper operation, one decode step at context {len(ids)} (medians of {steps} steps; {fp32.name}; "
          f"read bandwidth measured: fp32 {peaks['fp32'].gb_per_s:.1f} GB/s, bf16 {peaks['bf16'].gb_per_s:.1f} GB/s; "
          f"sum of operations fp32 {step_ms['fp32']:.1f} ms, bf16 {step_ms['bf16']:.1f} ms)\n")
    print("| operation (all layers) | fp32 ms | share | MiB read | GB/s (of read bw) | GFLOP/s | bf16 ms | share "
          "| MiB read | GB/s (of read bw) | GFLOP/s | bf16 / fp32 time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for op in runs["fp32"]:
        cells = []
        for k in ("fp32", "bf16"):
            s, b, flops = med(t for t, _, _ in runs[k][op]), runs[k][op][0][1], runs[k][op][0][2]
            gbs = b / s / 1e9 if s > 0 else 0.0
            gflops = flops / s / 1e9 if s > 0 else 0.0
            cells += [f"{s * 1e3:.2f}", f"{s * 1e3 / step_ms[k]:.0%}", f"{b / 2**20:.1f}",
                      f"{gbs:.1f} ({gbs / peaks[k].gb_per_s:.0%})", f"{gflops:.1f}"]
        ratio = med(t for t, _, _ in runs["bf16"][op]) / max(med(t for t, _, _ in runs["fp32"][op]), 1e-12)
        print(f"| {op} | " + " | ".join(cells) + f" | {ratio:.2f} |")
