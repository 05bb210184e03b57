"""Batched decode throughput and paged vs contiguous KV memory on the default model; prints markdown tables.

Run: python -m bench.batching [--batches 1,2,4,8,16] [--prompt-len 32] [--rounds 3] [--chunk 4] [--threads N]
     [--remeasure-peaks]
     python -m bench.batching --quick   (batches 1,2,4, a few steps: a smoke test in seconds, not a measurement)

Throughput: for each batch size b, b copies of the same prompt (greedy) are prefilled in one forward, then
decode steps of all b rows run through `step_rows`, on the engine's contiguous `KVCache` and on the
`PagedKVCache` batch view (blocks of 16). Aggregate tokens/s = b / the median step time. The machine may
be shared, so configurations take turns in short chunks, round after round (as bench/engine.py does), and
a burst of load elsewhere hits every configuration rather than one. Compare ratios within a run.

Roofline: each batch's decode step is counted by `inspector.serving.roofline.forward_cost` (b rows of one
token after the prompt and half the steps: weights read once, KV read and written) and divided by the
median contiguous step time: achieved GB/s and GFLOP/s, beside the machine's peaks (a matmul and a
memory-read benchmark, measured once and cached next to the model). Decode at batch 1 should sit near the
bandwidth roof; as the batch grows the same weight bytes serve more tokens, so GFLOP/s rises and the
step moves right on the roofline (FLOPs per byte).

Memory: a fixed mixed set of requests (prompt lengths, max new tokens, where each actually stopped),
held at once: a contiguous cache reserves every request's prompt + max new tokens, the paged cache holds
ceil(length / block size) blocks of its actual length. Computed by `PagedKVCache.usage()` on a pool whose
tensors live on the meta device (bookkeeping only, nothing allocated).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from inspector.engine.steps import new_cache, step_rows
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.roofline import cached_peaks, forward_cost, peaks_directory
from inspector.units import MIB

TEXT = ("The history of science is the study of the development of science and scientific knowledge, "
        "including both the natural and social sciences. Science is a body of empirical, theoretical, and "
        "practical knowledge about the natural world, produced by scientists. ") * 4


def decode_config(model, config, kind: str, b: int, prompt: list[int], max_steps: int):
    """A ready-to-step state: (cache view, next token per row) after prefilling b copies of the prompt."""
    if kind == "contiguous":
        cache = new_cache(model, batch=b)
    else:
        blocks = b * -(-(len(prompt) + max_steps + 1) // 16)
        pool = PagedKVCache(config, blocks, 16, dtype=model.model.embed_tokens.weight.dtype)
        for s in range(b):
            pool.add(s)
        cache = pool.batch(list(range(b)))
    logits = step_rows(model, [prompt] * b, cache)  # (b, V)
    return cache, logits.argmax(-1).tolist()


def throughput(loaded, batches: list[int], prompt_len: int, rounds: int, chunk: int) -> list[dict]:
    model = loaded.model
    prompt = loaded.tokenizer.encode(TEXT)[:prompt_len]
    states, times = {}, {}
    for b in batches:
        for kind in ("contiguous", "paged"):
            states[b, kind] = decode_config(model, loaded.config, kind, b, prompt, rounds * chunk)
            times[b, kind] = []
    for _ in range(rounds):
        for key, (cache, tokens) in states.items():
            for _ in range(chunk):
                t0 = time.perf_counter()
                logits = step_rows(model, [[t] for t in tokens], cache)  # (b, V)
                tokens = logits.argmax(-1).tolist()
                times[key].append(time.perf_counter() - t0)
            states[key] = (cache, tokens)
    rows = []
    for b in batches:
        c, p = (statistics.median(times[b, k]) for k in ("contiguous", "paged"))
        rows.append({"batch": b, "step_ms": c * 1e3, "tok_s": b / c, "paged_step_ms": p * 1e3, "paged_tok_s": b / p})
    return rows


def mixed_requests(n: int = 16, seed: int = 0) -> list[tuple[int, int, int]]:
    """(prompt length, max new tokens, tokens generated before stopping), a fixed pseudo-random mix."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt, max_new = rng.randint(8, 400), rng.choice([256, 512, 1024])
        out.append((prompt, max_new, rng.randint(1, max_new)))
    return out


def memory(config, requests: list[tuple[int, int, int]], block_size: int) -> dict:
    blocks = sum(-(-(p + m) // block_size) for p, m, _ in requests)
    pool = PagedKVCache(config, blocks, block_size, device="meta")  # accounting only: no storage
    for s, (p, m, g) in enumerate(requests):
        pool.add(s, max_len=p + m)
        pool.reserve(s, p + g)
        pool.batch([s]).advance(p + g)
    u = pool.usage()
    return {"block_size": block_size, "tokens": u.tokens_stored, "paged": u.bytes_used,
            "contiguous": u.bytes_contiguous, "exact": u.tokens_stored * pool.bytes_per_position}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.batching", description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--layout", default="batch", choices=["batch", "decode"],
                    help="weight layout (inspector.models.loader): batch, as serve-sim loads, or the app's decode")
    ap.add_argument("--remeasure-peaks", action="store_true", help="measure the peaks again, keeping the higher")
    ap.add_argument("--quick", action="store_true", help="batches 1,2,4, prompt 8, 2 steps each: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.prompt_len, args.rounds, args.chunk = "1,2,4", 8, 1, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    from inspector.models.loader import load_model

    loaded = load_model(args.model, layout=args.layout)
    batches = [int(b) for b in args.batches.split(",")]
    rows = throughput(loaded, batches, args.prompt_len, args.rounds, args.chunk)
    base = rows[0]["tok_s"]
    dtype = loaded.model.model.embed_tokens.weight.dtype
    peaks = cached_peaks(peaks_directory(loaded.weights_path), dtype, refresh=args.remeasure_peaks)
    elem = torch.empty((), dtype=dtype).element_size()
    context = args.prompt_len + args.rounds * args.chunk // 2  # mid-run: what a median step reads
    print(f"## Batched decode, {loaded.name} {str(dtype).removeprefix('torch.')} ({args.layout} layout), prompt {args.prompt_len} tokens, "
          f"{torch.get_num_threads()} threads, median of {args.rounds * args.chunk} steps\n")
    print(f"Peaks (measured once, cached): {peaks.gflops_per_s:.1f} GFLOP/s matmul, {peaks.gb_per_s:.1f} GB/s read "
          f"({peaks.key}); ridge {peaks.ridge:.1f} FLOP/byte.\n")
    print("| batch | step ms | tokens/s | x batch 1 | paged step ms | paged tokens/s | FLOP/byte | GB/s | % of peak GB/s "
          "| GFLOP/s | % of peak GFLOP/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cost = forward_cost(loaded.config, [(1, context)] * r["batch"], elem)
        secs = r["step_ms"] / 1e3
        gbs, gflops = cost.bytes_moved / secs / 1e9, cost.flops / secs / 1e9
        print(f"| {r['batch']} | {r['step_ms']:.1f} | {r['tok_s']:.1f} | {r['tok_s'] / base:.2f} | "
              f"{r['paged_step_ms']:.1f} | {r['paged_tok_s']:.1f} | {cost.intensity:.2f} | {gbs:.1f} | "
              f"{100 * gbs / peaks.gb_per_s:.0f} | {gflops:.1f} | {100 * gflops / peaks.gflops_per_s:.0f} |")
    reqs = mixed_requests()
    print(f"\n## KV memory of {len(reqs)} mixed requests held at once (prompt 8-400, max new 256/512/1024, "
          "stopping early at random)\n")
    print("| block size | tokens held | exact KV MiB | paged MiB | contiguous (max length) MiB | contiguous / paged |")
    print("|---:|---:|---:|---:|---:|---:|")
    for bs in (8, 16, 32):
        m = memory(loaded.config, reqs, bs)
        print(f"| {bs} | {m['tokens']} | {m['exact'] / MIB:.1f} | {m['paged'] / MIB:.1f} | "
              f"{m['contiguous'] / MIB:.1f} | {m['contiguous'] / m['paged']:.2f} |")


if __name__ == "__main__":
    main()
