"""Prefix caching and chunked prefill in the serving scheduler, on a workload with a common system prompt:
TTFT and TPOT with and without each, the prefix cache's hit rate, blocks shared at the peak, prompt
tokens computed, and the wall time, plain serving being the peer in the same run.

Run: python -m bench.prefix_cache [--requests 8] [--max-new-tokens 16] [--arrival-every 2] [--chunk 64]
     [--block-size 16] [--max-batch 4] [--threads N] [--model SOURCE]
     python -m bench.prefix_cache --quick   (4 requests, 4 tokens: a smoke test, not a measurement)

Every request is the chat template around one SYSTEM prompt (about 200 tokens) and its own short
question (`inspector.serving.prefix_compare`, as the Serving lab runs it); request i arrives at step
i x --arrival-every. Greedy decoding: the four configurations produce the same tokens (checked), so the
table compares only time and work.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from inspector.models.loader import load_model
from inspector.serving.prefix_compare import compare, library_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--arrival-every", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.max_new_tokens = 4, 4
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model, layout="batch")
    prompts = library_workload(loaded.tokenizer, args.requests)
    print(f"{loaded.name}: {args.requests} requests of {min(map(len, prompts))}-{max(map(len, prompts))} prompt "
          f"tokens sharing one system prompt, {args.max_new_tokens} new tokens each, arriving every "
          f"{args.arrival_every} steps; batch {args.max_batch}, blocks of {args.block_size}, "
          f"{torch.get_num_threads()} threads\n")
    print("| configuration | TTFT mean ms | TTFT p50 ms | TPOT mean ms | hit rate | blocks shared (peak) | "
          "prompt tokens computed | steps | wall s | vs plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    runs = compare(loaded.model, loaded.config, loaded.dtype, prompts, args.max_new_tokens, chunk=args.chunk,
                   arrival_every=args.arrival_every, block_size=args.block_size, max_batch=args.max_batch)
    base = runs[0]
    for r in runs:
        assert r.same_outputs, f"{r.label}: outputs differ from plain serving"
        print(f"| {r.label} | {statistics.mean(r.ttft_ms):.0f} | {statistics.median(r.ttft_ms):.0f} | "
              f"{statistics.mean(r.tpot_ms):.1f} | {r.hit_rate:.0%} | {r.blocks_shared} | {r.prompt_tokens_computed} | "
              f"{r.steps} | {r.wall_s:.1f} | {r.wall_s / base.wall_s:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
