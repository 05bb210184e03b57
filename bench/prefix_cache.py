"""Prefix caching and chunked prefill in the serving scheduler, on a workload with a common system prompt:
TTFT and TPOT with and without each, the prefix cache's hit rate, blocks shared at the peak, prompt
tokens computed, and the wall time, plain serving being the peer in the same run.

Run: python -m bench.prefix_cache [--requests 8] [--max-new-tokens 16] [--arrival-every 2] [--chunk 64]
     [--block-size 16] [--max-batch 4] [--threads N] [--model SOURCE]
     python -m bench.prefix_cache --quick   (4 requests, 4 tokens: a smoke test, not a measurement)

Every request is the chat template around one SYSTEM prompt (about 200 tokens) and its own short
question; request i arrives at step i x --arrival-every. Greedy decoding: the four configurations produce
the same tokens (checked), so the table compares only time and work.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inspector.models.loader import load_model
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.scheduler import Scheduler

SYSTEM = ("You are the help desk of a public library. Answer in one or two short sentences, politely and "
          "precisely. The library opens at nine in the morning and closes at eight in the evening on weekdays, "
          "and at five on Saturdays; it is closed on Sundays and public holidays. Members may borrow up to "
          "twelve books for three weeks and renew them twice online, unless another member has reserved them. "
          "Late returns cost twenty cents per book per day. The reading room on the second floor is quiet; "
          "group rooms on the first floor can be booked for two hours at a time. Printing costs ten cents a "
          "page in black and white and fifty cents in colour. Wi-Fi is free: the network is called Library-Guest "
          "and needs no password. If you do not know an answer, say so and suggest asking at the front desk.")
QUESTIONS = ["When do you open on Saturday?", "How many books can I borrow?", "Is the Wi-Fi free?",
             "How much does colour printing cost?", "Can I book a group room?", "What is the fine for late books?",
             "Are you open on Sunday?", "Can I renew a reserved book?", "Where is the quiet room?",
             "How long can I keep a book?", "What is the Wi-Fi network called?", "Do you open on holidays?"]


def serve(loaded, prompts, args, prefix_caching: bool, chunk: int | None) -> dict:
    longest = max(len(p) for p in prompts) + args.max_new_tokens
    blocks = args.max_batch * -(-longest // args.block_size) + 8
    cache = PagedKVCache(loaded.config, blocks, args.block_size, dtype=loaded.dtype, prefix_caching=prefix_caching)
    sched = Scheduler(loaded.model, cache, max_batch=args.max_batch, eos_ids=(), prefill_chunk=chunk)
    for i, ids in enumerate(prompts):
        sched.add(ids, args.max_new_tokens, i * args.arrival_every)
    shared, t0 = 0, time.perf_counter()
    while not sched.done:
        sched.step()
        shared = max(shared, cache.prefix_stats().blocks_shared)
    wall = time.perf_counter() - t0
    stats = cache.prefix_stats()
    computed = sum(r.num_tokens for rec in sched.records for r in rec.rows if r.kind == "prefill")
    return {"outputs": [s.output_ids for s in sched.sequences], "wall": wall, "steps": len(sched.records),
            "ttft": [s.ttft_ms for s in sched.sequences], "tpot": [s.tpot_ms for s in sched.sequences if s.tpot_ms],
            "hit_rate": stats.hit_rate, "shared": shared, "computed": computed}


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
    prompts = [loaded.tokenizer.prompt_ids(QUESTIONS[i % len(QUESTIONS)], True, SYSTEM) for i in range(args.requests)]
    print(f"{loaded.name}: {args.requests} requests of {min(map(len, prompts))}-{max(map(len, prompts))} prompt "
          f"tokens sharing one system prompt, {args.max_new_tokens} new tokens each, arriving every "
          f"{args.arrival_every} steps; batch {args.max_batch}, blocks of {args.block_size}, "
          f"{torch.get_num_threads()} threads\n")
    print("| configuration | TTFT mean ms | TTFT p50 ms | TPOT mean ms | hit rate | blocks shared (peak) | "
          "prompt tokens computed | steps | wall s | vs plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for label, prefix, chunk in [("plain", False, None), ("prefix caching", True, None),
                                 (f"chunked prefill {args.chunk}", False, args.chunk),
                                 (f"both", True, args.chunk)]:
        r = serve(loaded, prompts, args, prefix, chunk)
        base = base or r
        assert r["outputs"] == base["outputs"], f"{label}: outputs differ from plain serving"
        print(f"| {label} | {statistics.mean(r['ttft']):.0f} | {statistics.median(r['ttft']):.0f} | "
              f"{statistics.mean(r['tpot']):.1f} | {r['hit_rate']:.0%} | {r['shared']} | {r['computed']} | "
              f"{r['steps']} | {r['wall']:.1f} | {r['wall'] / base['wall']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
