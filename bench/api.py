"""The Python API's speed on the default model, beside `transformers` on the same weights, in one run; prints
markdown tables.

Run: python -m bench.api [--rounds 5] [--steps 32] [--prompt 64] [--cache-prompt 512] [--threads 1]
     [--clock wall|cpu] [--no-split]

Goals (issue 43), each a ratio of medians measured in this run:
- decode: `model.prefill(ids=...)` then `run.step(steps)` through the public API at its defaults (every
  forward recorded, the logit lens and every other analysis only when asked, greedy) against transformers'
  own decode loop (`generate` of steps + 1 greedy tokens, the prefill included on both sides):
  at least 1.2x faster (wall time of the whole call; per-step medians printed beside it). The same decode by
  the engine alone (no recorder, no session, argmax) is printed beside them: API / engine alone is what the
  API's bookkeeping (recording, the sample record, detokenizing) costs;
- cache: `run.cache("blocks.*.hook_resid_post", step=0)` on a `--cache-prompt`-token prompt (every layer's
  residual, the prefill run again with a capturing recorder) against one plain forward of the engine over
  the same ids (no recorder): within 1.5x. transformers' forward (`output_hidden_states=True`, which also
  keeps every layer's residual) is printed beside it.
Where a decode step goes (skipped with `--no-split`): the same three decodes on a checkpoint with the default
model's layers, heads, vocabulary and tokenizer at hidden size 72 (random weights, written to a temporary
directory), whose forwards read about 4% of the bytes (20 MB, most of it the LM head): their step time is the
per-operation cost (Python, dispatch, the small ops) each side pays whatever the width, plus that reading.
The default model's step minus that is the time spent reading its weights (fp32, every matrix once per
step), printed with its GB/s; transformers' step over the API's weight reading alone is the most the API could be faster if its per-operation cost were zero.
The machine may be shared: the sides alternate round after round, and both the medians and the fastest
round are printed, with the goals' ratios of both. Both sides use the same torch thread count (`--threads`).
`--threads 1 --clock cpu` times the CPU time of the one thread that works (`time.thread_time`), which other
processes on a busy machine barely move; wall time is the default.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.engine import Stamps, prompt_ids

clock = time.perf_counter  # --clock cpu: time.thread_time


def api_decode(model, ids: list[int], steps: int) -> tuple[float, list[float], list[int]]:
    """(seconds for prefill + steps, per decode step seconds, the tokens) through the public API."""
    t0 = clock()
    run = model.prefill(ids=ids, max_new_tokens=steps + 1)
    marks = [clock()]
    for _ in range(steps):
        run.step()
        marks.append(clock())
    return marks[-1] - t0, [b - a for a, b in zip(marks, marks[1:])], run.generated_ids


def engine_decode(loaded, ids: list[int], steps: int) -> tuple[float, list[int]]:
    """(seconds, the tokens) of the same greedy decode by the engine alone: no recorder, no session, no record,
    argmax of each forward's logits (the floor under the API's bookkeeping)."""
    from inspector.engine import steps as engine

    t0 = clock()
    cache = engine.new_cache(loaded.model)
    tokens = [int(engine.prefill(loaded.model, ids, cache).argmax())]
    for _ in range(steps):
        tokens.append(int(engine.decode_step(loaded.model, tokens[-1], cache).argmax()))
    return clock() - t0, tokens


def hf_decode(hf, ids: list[int], steps: int) -> tuple[float, list[float], list[int]]:
    """The same through transformers' `generate` (greedy, steps + 1 new tokens)."""
    stamps = Stamps(clock)
    with torch.no_grad():
        t0 = clock()
        out = hf.generate(torch.tensor([ids]), max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False,
                          eos_token_id=None, pad_token_id=0, streamer=stamps)
        total = clock() - t0
    t = stamps.times  # [prompt, token 1 (after the prefill), token 2, ...]
    return total, [b - a for a, b in zip(t[1:], t[2:])], out[0, len(ids):].tolist()


def plain_forward(loaded, ids: list[int]) -> float:
    from inspector.engine import steps

    t0 = clock()
    steps.forward(loaded.model, steps.new_cache(loaded.model), [ids])
    return clock() - t0


def hf_forward(hf, ids: list[int]) -> float:
    with torch.no_grad():
        t0 = clock()
        hf(torch.tensor([ids]), output_hidden_states=True)
        return clock() - t0


def api_cache(run) -> tuple[float, int]:
    t0 = clock()
    cache = run.cache("blocks.*.hook_resid_post", step=0)
    return clock() - t0, sum(a.nbytes for a in cache.values())


def narrow_checkpoint(loaded, directory) -> None:
    """Write the default model's structure at hidden size 72 (9 heads of 8, 3 KV heads, MLP 144) with random
    weights and its tokenizer into `directory` (see the module doc: the per-operation cost of a step)."""
    import json
    import shutil

    import transformers

    config = json.loads((loaded.weights_path / "config.json").read_text())
    config.update(hidden_size=72, intermediate_size=144, head_dim=8)
    hf_config = transformers.AutoConfig.for_model(**config)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(hf_config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (loaded.weights_path / name).exists():
            shutil.copy(loaded.weights_path / name, directory)


def step_split(model, hf, ids: list[int], steps: int, rounds: int) -> dict[str, float]:
    """Per-step medians (s) of the API, the engine alone and transformers over `rounds` alternating rounds."""
    per: dict[str, list[float]] = {"api": [], "engine": [], "hf": []}
    api_decode(model, ids, 2), hf_decode(hf, ids, 2), engine_decode(model.loaded, ids, 2)  # warm-up
    for _ in range(rounds):
        per["api"] += api_decode(model, ids, steps)[1]
        per["hf"] += hf_decode(hf, ids, steps)[1]
        seconds, _ = engine_decode(model.loaded, ids, steps)
        per["engine"].append(seconds / (steps + 1))  # prefill included: an upper bound of its step
    return {k: statistics.median(v) for k, v in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.api")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens of the decode comparison")
    ap.add_argument("--cache-prompt", type=int, default=512, help="prompt tokens of the cache comparison")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, the same for both sides")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: the thread's CPU time (1 thread)")
    ap.add_argument("--no-split", dest="split", action="store_false", help="skip where a decode step goes")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    global clock
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    import transformers

    import inspector

    model = inspector.load()
    loaded = model.loaded
    hf = transformers.AutoModelForCausalLM.from_pretrained(loaded.weights_path, dtype=torch.float32).eval()
    ids = prompt_ids(loaded.tokenizer, args.prompt)
    long_ids = prompt_ids(loaded.tokenizer, args.cache_prompt)
    cached_run = model.prefill(ids=long_ids, max_new_tokens=1)

    api_decode(model, ids, 2), hf_decode(hf, ids, 2), engine_decode(loaded, ids, 2)  # warm-up
    api_cache(cached_run), plain_forward(loaded, long_ids), hf_forward(hf, long_ids)
    names = ("api", "hf", "engine", "api_step", "hf_step", "cache", "plain", "hf_fwd")
    rows: dict[str, list[float]] = {k: [] for k in names}
    same = True
    for _ in range(args.rounds):
        total, per, ours = api_decode(model, ids, args.steps)
        rows["api"].append(total)
        rows["api_step"] += per
        total, per, theirs = hf_decode(hf, ids, args.steps)
        rows["hf"].append(total)
        rows["hf_step"] += per
        seconds, bare = engine_decode(loaded, ids, args.steps)
        rows["engine"].append(seconds)
        same &= ours == theirs == bare
        seconds, nbytes = api_cache(cached_run)
        rows["cache"].append(seconds)
        rows["plain"].append(plain_forward(loaded, long_ids))
        rows["hf_fwd"].append(hf_forward(hf, long_ids))

    med = {k: statistics.median(v) for k, v in rows.items()}
    low = {k: min(v) for k, v in rows.items()}
    print(f"default model {loaded.name}, {args.threads} torch thread(s), {args.clock} clock, {args.rounds} rounds, "
          f"greedy tokens equal: {same}\n")
    print("| what | median | fastest |")
    print("|---|---|---|")
    print(f"| API prefill ({args.prompt} tokens) + run.step({args.steps}) | {med['api']:.3f} s | {low['api']:.3f} s |")
    print(f"| transformers generate ({args.steps + 1} tokens) | {med['hf']:.3f} s | {low['hf']:.3f} s |")
    print(f"| engine alone, same decode (no recorder, argmax) | {med['engine']:.3f} s | {low['engine']:.3f} s |")
    print(f"| API decode step | {1e3 * med['api_step']:.1f} ms | {1e3 * low['api_step']:.1f} ms |")
    print(f"| transformers decode step | {1e3 * med['hf_step']:.1f} ms | {1e3 * low['hf_step']:.1f} ms |")
    print(f"| run.cache every resid_post, {args.cache_prompt} tokens ({nbytes / 2**20:.1f} MiB) | "
          f"{1e3 * med['cache']:.0f} ms | {1e3 * low['cache']:.0f} ms |")
    print(f"| engine plain forward, {args.cache_prompt} tokens | {1e3 * med['plain']:.0f} ms | {1e3 * low['plain']:.0f} ms |")
    print(f"| transformers forward with hidden states | {1e3 * med['hf_fwd']:.0f} ms | {1e3 * low['hf_fwd']:.0f} ms |")
    speed, fastest = med["hf"] / med["api"], low["hf"] / low["api"]
    ratio, low_ratio = med["cache"] / med["plain"], low["cache"] / low["plain"]
    print("\n| goal | medians | fastest | met (medians) |")
    print("|---|---|---|---|")
    print(f"| API decode >= 1.2x faster than transformers | {speed:.2f}x (per step {med['hf_step'] / med['api_step']:.2f}x) "
          f"| {fastest:.2f}x (per step {low['hf_step'] / low['api_step']:.2f}x) | {'yes' if speed >= 1.2 else 'no'} |")
    print(f"| (the API's bookkeeping: API / engine alone) | {med['api'] / med['engine']:.3f}x | "
          f"{low['api'] / low['engine']:.3f}x | |")
    print(f"| run.cache within 1.5x of a plain forward | {ratio:.2f}x | {low_ratio:.2f}x | {'yes' if ratio <= 1.5 else 'no'} |")
    if args.split:
        print_split(model, hf, ids, args, med)


def print_split(model, hf, ids: list[int], args, med: dict[str, float]) -> None:
    """The table of where a decode step goes (see the module doc)."""
    import tempfile

    import transformers

    import inspector

    weight_bytes = sum(p.numel() * p.element_size() for p in model.loaded.model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        narrow_checkpoint(model.loaded, tmp)
        narrow = inspector.load(tmp)
        narrow_hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
        small = step_split(narrow, narrow_hf, ids, args.steps, args.rounds)
        narrow_bytes = sum(p.numel() * p.element_size() for p in narrow.loaded.model.parameters())
    api_read, hf_read = med["api_step"] - small["api"], med["hf_step"] - small["hf"]
    print(f"\nWhere a decode step goes (medians; the per-operation cost measured on the same structure at hidden size "
          f"72; weights {weight_bytes / 1e6:.0f} MB fp32, read once per step by both sides):\n")
    print("| | API | transformers |")
    print("|---|---|---|")
    print(f"| decode step, default model | {1e3 * med['api_step']:.1f} ms | {1e3 * med['hf_step']:.1f} ms |")
    print(f"| per-operation cost (hidden size 72, {narrow_bytes / 1e6:.0f} MB of weights; engine alone "
          f"{1e3 * small['engine']:.1f} ms, prefill shared in) | "
          f"{1e3 * small['api']:.1f} ms | {1e3 * small['hf']:.1f} ms |")
    print(f"| the rest: reading the weights | {1e3 * api_read:.1f} ms ({weight_bytes / api_read / 1e9:.1f} GB/s) | "
          f"{1e3 * hf_read:.1f} ms ({weight_bytes / hf_read / 1e9:.1f} GB/s) |")
    print(f"| transformers' step / the API's weight reading alone (the API's speed-up with zero per-operation cost) | "
          f"{med['hf_step'] / api_read:.2f}x | |")


if __name__ == "__main__":
    main()
