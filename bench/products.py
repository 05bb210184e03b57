"""The per-product table of `python -m bench.engine`: each kind of weight product of a decode step against the
machine's copy bandwidth, measured in the same run.

A decode step multiplies one row of activations by every weight matrix once: per layer the stacked q/k/v,
o, stacked gate/up and down, then the LM head. Streaming a matrix is the whole cost of such a product, so
its achieved rate (weight bytes over time) is bounded by the rate the machine reads memory. Two roofs are
measured here, in the same process and threads: copy (`dst.copy_(src)` of `BW_MIB` MiB, counted as the
bytes of `src` per second: each byte is read once and written once) and read (`src.sum()`, read only; the
Serving lab's roofline uses this one), on an fp32 buffer (bytes are bytes: a bf16 `copy_` runs a slower
kernel, not slower memory). Each row times all layers' matrices of one kind, one product after another
(as a step runs them, through the engine's `project`), in the engine's fp32 decode layout and in bf16, and
gives its GB/s and that rate against both roofs. Every time is the best of several runs (what the machine
can do; a shared machine only ever slows a run down). The bf16 / fp32 column is the speedup bf16's
half-size weights earn per product.
"""

from __future__ import annotations

import time

import torch

from inspector.units import MIB

BW_MIB = 256  # well past the last-level cache


def _best(fn, repeats: int, clock) -> float:
    fn()
    return min(_timed(fn, clock) for _ in range(repeats))


def _timed(fn, clock) -> float:
    t0 = clock()
    fn()
    return clock() - t0


@torch.inference_mode()
def bandwidths(repeats: int = 7, clock=time.perf_counter) -> tuple[float, float]:
    """(copy GB/s, read GB/s) of a `BW_MIB` MiB fp32 buffer, best of `repeats`."""
    src = torch.ones(BW_MIB * MIB // 4)
    dst = torch.empty_like(src)
    copy = _best(lambda: dst.copy_(src), repeats, clock)
    read = _best(lambda: src.sum(), repeats, clock)
    return src.nbytes / copy / 1e9, src.nbytes / read / 1e9


def product_groups(model) -> dict[str, list[torch.Tensor]]:
    """product kind -> the (N, K) weight matrices of that kind, one per layer (the LM head: one)."""
    from inspector.engine.linear import GATE_UP, QKV, stacked_weight

    groups: dict[str, list[torch.Tensor]] = {"q/k/v (stacked)": [], "o": [], "gate/up (stacked)": [], "down": []}
    for block in model.model.layers:
        attn, mlp = block.self_attn, block.mlp
        groups["q/k/v (stacked)"].append(stacked_weight(attn, QKV))
        groups["o"].append(attn.o_proj.weight)
        groups["gate/up (stacked)"].append(stacked_weight(mlp, GATE_UP))
        groups["down"].append(mlp.down_proj.weight)
    groups["LM head"] = [model.unembed_weight]
    return groups


@torch.inference_mode()
def _product_seconds(weights: list[torch.Tensor], rounds: int, clock) -> float:
    """Best seconds to multiply one row by every matrix in `weights`, one after another, as the engine does
    (`inspector.engine.linear.project`)."""
    from inspector.engine.linear import project

    xs = {k: torch.randn(1, k, dtype=weights[0].dtype) for k in {w.shape[1] for w in weights}}
    times = []
    for _ in range(rounds + 1):
        t0 = clock()
        for w in weights:
            project(xs[w.shape[1]], w)
        times.append(clock() - t0)
    return min(times[1:])


def step_order(groups: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
    """Every matrix of `product_groups` once, in the order a decode step reads them (layer by layer)."""
    per_layer = [groups[k] for k in ("q/k/v (stacked)", "o", "gate/up (stacked)", "down")]
    return [w for layer in zip(*per_layer) for w in layer] + groups["LM head"]


def print_product_table(fp32, bf16, rounds: int = 9, clock=time.perf_counter) -> dict[str, float] | None:
    """The table of the module doc, for the fp32 (decode layout) and bf16 models of one checkpoint, timed
    by `clock` (bench.engine's: wall time, or with one thread, its CPU time). Its last row runs every matrix
    once in a step's order (nothing left in cache from the same kind); returns those seconds per dtype."""
    if any(w is None for g in product_groups(fp32.model).values() for w in g):
        print("\n(per-product table skipped: this model's q/k/v or gate/up are not stacked)")
        return None
    copy, read = bandwidths(clock=clock)
    groups = {"fp32": product_groups(fp32.model), "bf16": product_groups(bf16.model)}
    print(f"\nper weight product, one row (M=1), all layers' matrices of the kind, best of {rounds}; bandwidth "
          f"measured now: copy {copy:.1f} GB/s, read-only {read:.1f} GB/s; {torch.get_num_threads()} threads\n")
    print("| product | matrices x shape (N x K) | fp32 MiB | fp32 ms | GB/s (of copy / read) | bf16 ms "
          "| GB/s (of copy / read) | bf16 / fp32 time |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in groups["fp32"]:
        cells, secs = [], {}
        fp32_mib = sum(w.numel() * w.element_size() for w in groups["fp32"][kind]) / MIB
        for name in ("fp32", "bf16"):
            ws = groups[name][kind]
            nbytes = sum(w.numel() * w.element_size() for w in ws)
            s = secs[name] = _product_seconds(ws, rounds, clock)
            gbs = nbytes / s / 1e9
            cells += [f"{s * 1e3:.2f}", f"{gbs:.1f} ({gbs / copy:.0%} / {gbs / read:.0%})"]
        w = groups["fp32"][kind][0]
        print(f"| {kind} | {len(groups['fp32'][kind])} x {w.shape[0]} x {w.shape[1]} | {fp32_mib:.1f} | "
              + " | ".join(cells) + f" | {secs['bf16'] / secs['fp32']:.2f} |")
    cells, step = [], {}
    ordered = {name: step_order(groups[name]) for name in ("fp32", "bf16")}
    for name, ws in ordered.items():
        step[name] = _product_seconds(ws, rounds, clock)
        gbs = sum(w.numel() * w.element_size() for w in ws) / step[name] / 1e9
        cells += [f"{step[name] * 1e3:.2f}", f"{gbs:.1f} ({gbs / copy:.0%} / {gbs / read:.0%})"]
    fp32_mib = sum(w.numel() * w.element_size() for w in ordered["fp32"]) / MIB
    print(f"| a decode step's products, in its order | {len(ordered['fp32'])} matrices | {fp32_mib:.1f} | "
          + " | ".join(cells) + f" | {step['bf16'] / step['fp32']:.2f} |")
    return step
