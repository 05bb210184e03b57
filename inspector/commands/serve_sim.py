"""`inspector serve-sim --prompts FILE [--max-batch N] [--block-size B] [--blocks N] [--max-new-tokens N]
[--prefill-chunk N] [--prefix-caching] [--arrivals S,S,... | --arrival-every N] [--n K --temperature T --top-k K --top-p P
--min-p P --seed S] [--chat] [--model SOURCE] [--json]`: serve the prompts of FILE (one per line, blank lines
skipped) through the continuous-batching scheduler over a paged KV cache.

Arrivals: `--arrivals 0,0,3,5` gives each prompt its engine step (one per prompt, in file order);
`--arrival-every N` makes prompt i arrive at step i x N; by default all arrive at step 0. `--n K` asks
for K continuations of every prompt (parallel sampling: one prefill, K forks sharing its blocks), drawn
with the sampling options, continuation i with seed + i; greedy (temperature 0) by default.

`--json` prints one object: requests (per request: prompt, prompt_ids, generated_ids, text, ttft_ms,
tpot_ms, finish_reason, preemptions, arrival_step, prompt_index, sample: one entry per continuation, in
prompt order), steps (per engine step: rows [{request, kind, tokens, context}], blocks_used, admitted,
preempted, finished, paged_bytes, contiguous_bytes: what caches reserved to each row's max length would
hold, elapsed_ms, and the roofline: flops and bytes_moved counted from the config
(`inspector.serving.roofline.forward_cost`, not measured), forward_ms measured, gflops_per_s and gb_per_s the
counts over that time), throughput
(generated_tokens, elapsed_s, tokens_per_s, steps), memory (peak_paged_bytes, peak_contiguous_bytes,
pool_bytes), peaks (the machine's measured gflops_per_s and gb_per_s, `inspector.serving.roofline`,
cached next to the model), prefix_cache (enabled, lookups, hits, hit_rate, tokens_reused: with
`--prefix-caching`, full prompt blocks found cached by the hash of their tokens and their prefix's) and the settings (model, block_size, blocks, bytes_per_block, max_batch, n). Without it, a readable summary. The pool defaults to a full batch
of the longest request. A request that cannot fit in the pool is refused alone (finish_reason says why);
the others run.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from inspector.commands.flags import chat_flags, json_flags, max_new_tokens_flags, model_flags, sampling_flags
from inspector.errors import InputError
from inspector.units import format_bytes
from inspector.validate import Bound, shown


MAX_BATCH = Bound("max-batch", True, 1)
BLOCK_SIZE = Bound("block-size", True, 1)
BLOCKS = Bound("blocks", True, 1, note="(at least --max-batch)")
PREFILL_CHUNK = Bound("prefill-chunk", True, 1)
ARRIVAL_STEP = Bound("arrival step", True, 0)
ARRIVAL_EVERY = Bound("arrival-every", True, 0)
N = Bound("n", True, 1, note="(at most --max-batch)")


def arrivals_arg(text: str) -> list[int]:
    """`--arrivals 0,0,3` as steps, each a whole number >= 0 (a usage error otherwise)."""
    try:
        return [int(ARRIVAL_STEP.parse(part)) for part in text.split(",")]
    except InputError:
        raise argparse.ArgumentTypeError("arrivals must be whole numbers >= 0, one per prompt, separated by "
                                         f"commas, got {shown(text)}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve-sim", help="continuous batching over a paged KV cache, on a file of prompts",
                              description=__doc__.split("\n\n")[0],
                              parents=[max_new_tokens_flags(32), sampling_flags(), chat_flags(), model_flags(),
                                       json_flags()])
    p.add_argument("--prompts", required=True, metavar="FILE", help="one prompt per line")
    p.add_argument("--max-batch", type=MAX_BATCH.argparse, default=8, metavar="N",
                   help=f"requests per forward, {MAX_BATCH.allowed} (default 8)")
    p.add_argument("--block-size", type=BLOCK_SIZE.argparse, default=16, metavar="B",
                   help=f"token positions per block, {BLOCK_SIZE.allowed} (default 16)")
    p.add_argument("--blocks", type=BLOCKS.argparse, default=None, metavar="N",
                   help=f"blocks in the pool, {BLOCKS.allowed} (default: a full batch of the longest request)")
    p.add_argument("--prefill-chunk", type=PREFILL_CHUNK.argparse, default=None, metavar="N",
                   help=f"prompt tokens per step, {PREFILL_CHUNK.allowed} (default: all)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--arrivals", type=arrivals_arg, default=None, metavar="S,S,...",
                      help="arrival step of each prompt, in order (whole numbers >= 0)")
    when.add_argument("--arrival-every", type=ARRIVAL_EVERY.argparse, default=None, metavar="N",
                      help=f"prompt i arrives at step i x N, {ARRIVAL_EVERY.allowed}")
    p.add_argument("--prefix-caching", action="store_true",
                   help="reuse the cached blocks of a prompt prefix seen before (chained block hashes, LRU eviction)")
    p.add_argument("--n", type=N.argparse, default=1, metavar="K",
                   help=f"continuations per prompt (parallel sampling), {N.allowed}; continuation i draws with "
                        "seed + i")
    p.set_defaults(func=main)


def read_prompts(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read --prompts {path}: {getattr(exc, 'strerror', None) or exc}") from None
    prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise InputError(f"--prompts {path} holds no prompt (one per line)")
    return prompts


def arrival_steps(args: argparse.Namespace, count: int) -> list[int]:
    """Each prompt's arrival step from --arrivals or --arrival-every (0 for all by default)."""
    if args.arrival_every is not None:
        return [i * args.arrival_every for i in range(count)]
    if args.arrivals is None:
        return [0] * count
    if len(args.arrivals) != count:
        raise InputError(f"--arrivals needs one step per prompt ({count}), got {len(args.arrivals)}")
    return args.arrivals


def sampling_params(args: argparse.Namespace) -> Any:
    from inspector.engine.config import SamplingParams

    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
    try:
        params.validate()
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return params


def check_settings(args: argparse.Namespace) -> None:
    """The limits between flags (each flag's own range is checked as it is parsed)."""
    if args.n > args.max_batch:
        raise InputError(f"--n {args.n} continuations run together: --max-batch must be at least {args.n}")
    if args.blocks is not None and args.blocks < args.max_batch:
        raise InputError(f"a batch of {args.max_batch} needs at least {args.max_batch} blocks (one per request); "
                         f"--blocks is {args.blocks}")


def check_pool_fits(config: Any, blocks: int, block_size: int, dtype: Any) -> None:
    """InputError when the pool (allocated up front) would not fit in the memory this machine has free."""
    import os

    import torch

    from inspector.engine.kv_cache import kv_bytes

    elem = torch.empty((), dtype=dtype).element_size()
    need = kv_bytes(config, blocks * block_size + 1, elem)  # the pool and its zero slot
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > free:
        raise InputError(f"a pool of {blocks} blocks of {block_size} positions takes {format_bytes(need)}; "
                         f"{format_bytes(free)} are free (lower --blocks, --block-size or --max-new-tokens)")


def simulate(args: argparse.Namespace) -> dict[str, Any]:
    """Load the model, run the scheduler to the end, return the --json object."""
    import time

    from inspector.models.loader import load_model
    from inspector.serving.paged_cache import PagedKVCache
    from inspector.serving.scheduler import Scheduler

    from inspector.serving.roofline import cached_peaks, peaks_directory

    prompts = read_prompts(args.prompts)
    check_settings(args)
    arrivals, params = arrival_steps(args, len(prompts)), sampling_params(args)
    loaded = load_model(args.model, layout="batch", device=args.device)  # every forward holds several rows
    tok = loaded.tokenizer
    if args.chat and not tok.has_chat_template:
        raise InputError(f"{loaded.name} has no chat template; drop --chat")
    ids = [tok.prompt_ids(p, args.chat) for p in prompts]
    blocks = args.blocks
    if blocks is None:  # a full batch of the longest request (one longer than the context is refused anyway)
        longest = min(max(len(i) for i in ids) + args.max_new_tokens, loaded.config.max_position_embeddings)
        blocks = args.max_batch * math.ceil(longest / args.block_size)
    check_pool_fits(loaded.config, blocks, args.block_size, loaded.dtype)
    cache = PagedKVCache(loaded.config, blocks, args.block_size, dtype=loaded.dtype, prefix_caching=args.prefix_caching)
    sched = Scheduler(loaded.model, cache, max_batch=args.max_batch, eos_ids=loaded.stop_ids,
                      prefill_chunk=args.prefill_chunk)
    for prompt_ids, arrival in zip(ids, arrivals):
        sched.add(prompt_ids, args.max_new_tokens, arrival, n=args.n, params=params)
    peaks = cached_peaks(peaks_directory(loaded.weights_path), loaded.dtype)
    t0 = time.perf_counter()
    records = sched.step_until_done()
    elapsed = time.perf_counter() - t0

    def ms(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    requests = [{
        "prompt": prompt, "prompt_ids": req.prompt_ids, "generated_ids": req.output_ids,
        "text": tok.decode(req.output_ids),
        "ttft_ms": ms(req.ttft_ms), "tpot_ms": ms(req.tpot_ms), "finish_reason": req.finish_reason,
        "preemptions": req.preemptions, "arrival_step": req.arrival_step,
        "prompt_index": req.request_id // args.n, "sample": req.request_id % args.n,
    } for prompt, req in zip((p for p in prompts for _ in range(args.n)), sched.requests)]
    max_len = {s.request_id: s.max_len for s in sched.requests}
    steps = [{
        "step": r.step, "rows": [{"request": row.request_id, "kind": row.kind, "tokens": row.num_tokens, "context": row.context}
                                for row in r.rows],
        "blocks_used": r.blocks_used, "admitted": r.admitted, "preempted": r.preempted, "finished": r.finished,
        "paged_bytes": r.blocks_used * cache.bytes_per_block,
        "contiguous_bytes": sum(max_len[row.request_id] for row in r.rows) * cache.bytes_per_position,
        "elapsed_ms": round(r.elapsed_ms, 3), "flops": r.flops, "bytes_moved": r.bytes_moved,
        "forward_ms": round(r.forward_ms, 3), "gflops_per_s": round(r.gflops_per_s, 4), "gb_per_s": round(r.gb_per_s, 4),
    } for r in records]
    generated = sum(len(s.output_ids) for s in sched.requests)
    prefix = cache.prefix_stats()
    return {
        "prefix_cache": {"enabled": args.prefix_caching, "lookups": prefix.lookups, "hits": prefix.hits,
                         "hit_rate": round(prefix.hit_rate, 4), "tokens_reused": prefix.tokens_reused},
        "model": loaded.name, "block_size": args.block_size, "blocks": blocks, "max_batch": args.max_batch, "n": args.n,
        "peaks": {"gflops_per_s": round(peaks.gflops_per_s, 2), "gb_per_s": round(peaks.gb_per_s, 2), "key": peaks.key},
        "bytes_per_block": cache.bytes_per_block, "requests": requests, "steps": steps,
        "memory": {"peak_paged_bytes": max((st["paged_bytes"] for st in steps), default=0),
                   "peak_contiguous_bytes": max((st["contiguous_bytes"] for st in steps), default=0),
                   "pool_bytes": cache.pool_nbytes},
        "throughput": {"generated_tokens": generated, "elapsed_s": round(elapsed, 4),
                       "tokens_per_s": round(generated / elapsed, 2) if elapsed > 0 else None, "steps": len(records)},
    }


def summary(result: dict[str, Any]) -> str:
    lines = [f"{result['model']}: {len(result['requests'])} requests, max batch {result['max_batch']}, "
             f"{result['blocks']} blocks of {result['block_size']} positions"]
    for i, r in enumerate(result["requests"]):
        if r["finish_reason"] and not r["generated_ids"]:
            lines.append(f"  #{i} refused: {r['finish_reason']}")
            continue
        tpot = f"{r['tpot_ms']:.1f}" if r["tpot_ms"] is not None else "-"
        lines.append(f"  #{i} {len(r['generated_ids'])} tokens ({r['finish_reason']}), ttft {r['ttft_ms']:.0f} ms, "
                     f"tpot {tpot} ms, preempted {r['preemptions']}x: {r['text']!r}")
    pk = result["peaks"]
    lines.append(f"  step  rows (request:kind tokens)                blocks  GFLOP/s  GB/s  (peaks {pk['gflops_per_s']:.0f}"
                 f" GFLOP/s, {pk['gb_per_s']:.1f} GB/s, measured; per step: FLOPs and bytes counted from the config "
                 "over the forward's measured time)")
    for s in result["steps"]:
        rows = " ".join(f"{row['request']}:{row['kind'][0]}{row['tokens']}" for row in s["rows"]) or "(idle)"
        extra = f"  preempted {s['preempted']}" if s["preempted"] else ""
        lines.append(f"  {s['step']:>4}  {rows:<40} {s['blocks_used']:>6} {s['gflops_per_s']:>8.1f} "
                     f"{s['gb_per_s']:>5.1f}{extra}")
    m, kib = result["memory"], 1024
    lines.append(f"KV at peak: paged {m['peak_paged_bytes'] / kib:.0f} KiB, contiguous caches reserved to each "
                 f"request's max length {m['peak_contiguous_bytes'] / kib:.0f} KiB")
    pc = result["prefix_cache"]
    if pc["enabled"]:
        lines.append(f"prefix cache: {pc['hits']} of {pc['lookups']} prompt blocks found cached "
                     f"({pc['hit_rate']:.0%}), {pc['tokens_reused']} prompt tokens not recomputed")
    t = result["throughput"]
    lines.append(f"{t['generated_tokens']} tokens in {t['steps']} steps, {t['elapsed_s']:.2f} s: "
                 f"{t['tokens_per_s']} tokens/s")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    result = simulate(args)
    print(json.dumps(result, ensure_ascii=False) if args.json else summary(result))
    return 0
