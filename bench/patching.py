"""Activation patching: the whole resid_pre sweep (every layer x position) batched against one run per cell.

Run: python -m bench.patching [--point resid_pre] [--unbatched-layers 3] [--threads N]
     python -m bench.patching --quick   (a tiny model: a smoke test in seconds, not a measurement)

The prompt pair is an indirect-object sentence of 32 tokens and its copy with the last name swapped
(" John" -> " Mary"); the answer is " Mary", the wrong token " John". Batched: `inspector.analysis.patching.
sweep` (positions share the corrupted prefix's KV cache, one row per layer). Unbatched: one forward of
the whole corrupted prompt per cell. One run per cell of a 30-layer model takes minutes on 2 cores, so by
default it runs for `--unbatched-layers` layers (every position) and its whole-sweep time is that time
scaled to all layers (marked "scaled"); `--unbatched-layers 0` runs it whole. Both use the same cells
for the agreement column (max |difference| of the scores). The goal: the whole batched sweep of the
default model (30 layers, 32 positions) in 60 s or less.
"""

from __future__ import annotations

import argparse

import torch

from inspector.analysis import patching
from inspector.models.loader import load_model

CLEAN = ("After the long meeting at the office downtown, Mary and John walked to the small cafe near the river. "
         "Later that evening, John handed the heavy book to")
POSITIONS = 32
GOAL_S = 60.0


def prompts(tokenizer) -> tuple[list[int], list[int], int, int]:
    """(clean ids, corrupted ids, answer id, wrong id): the last " John" of the clean prompt becomes " Mary"."""
    answer, wrong = tokenizer.encode(" Mary")[0], tokenizer.encode(" John")[0]
    if answer == wrong:  # a tokenizer without the names as single tokens (the tiny test model's)
        wrong = answer + 1
    clean = tokenizer.encode(CLEAN)[:POSITIONS]
    at = max((i for i, t in enumerate(clean) if t == wrong), default=len(clean) - 6)
    corrupt = list(clean)
    corrupt[at] = answer if clean[at] != answer else wrong
    return clean, corrupt, answer, wrong


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.patching", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model source (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--point", default="resid_pre", choices=patching.POINTS)
    ap.add_argument("--unbatched-layers", type=int, default=3, help="layers the unbatched peer runs (0: all)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="the unbatched peer over every layer: for tiny models")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    model, n_layers = loaded.model, loaded.config.num_hidden_layers
    clean, corrupt, answer, wrong = prompts(loaded.tokenizer)
    batched = patching.sweep(model, clean, corrupt, answer, wrong, args.point)
    k = n_layers if args.quick or args.unbatched_layers <= 0 else min(args.unbatched_layers, n_layers)
    layers = [round(i * (n_layers - 1) / max(k - 1, 1)) for i in range(k)] if k < n_layers else list(range(n_layers))
    single = patching.sweep(model, clean, corrupt, answer, wrong, args.point, batched=False, layers=layers)
    cells, T = n_layers * len(clean), len(clean)
    scale = n_layers / len(layers)
    whole_single = single.seconds * scale
    agree = max(abs(single.matrix[i][p] - batched.matrix[L][p]) for i, L in enumerate(layers) for p in range(T))
    print(f"# {args.point} patching sweep: {loaded.name}, {n_layers} layers x {T} positions = {cells} cells, "
          f"{torch.get_num_threads()} threads")
    print(f"LD clean {batched.clean_logit_diff:.3f}, LD corrupt {batched.corrupt_logit_diff:.3f}\n")
    print("| mode | cells run | seconds | ms per cell | whole sweep (s) | speedup | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    print(f"| batched | {cells} | {batched.seconds:.1f} | {1e3 * batched.seconds / cells:.1f} | "
          f"{batched.seconds:.1f} | {whole_single / batched.seconds:.1f}x | - |")
    mark = "" if scale == 1 else " (scaled)"
    print(f"| unbatched | {len(layers) * T} | {single.seconds:.1f} | {1e3 * single.seconds / (len(layers) * T):.1f} | "
          f"{whole_single:.1f}{mark} | 1.0x | {agree:.1e} |")
    verdict = "meets" if batched.seconds <= GOAL_S else "misses"
    print(f"\nbatched whole sweep {batched.seconds:.1f} s: {verdict} the goal of {GOAL_S:.0f} s")


if __name__ == "__main__":
    main()
