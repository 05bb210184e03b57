"""Engine speed and memory on the default model: prefill, decode tok/s, recorder cost, cache vs no cache,
bf16, and transformers `generate` (fp32, same weights) as the peer. Prints a markdown table.

Run: python bench/engine.py [--rounds 3] [--steps 16]
Same process, same machine, 2 threads; configurations are interleaved round by round and the median
is reported, because the machine may be shared. Decode tok/s is wall time per step, everything
included (forward, sampling, building the record). RSS is measured in a fresh subprocess: a 2,048-token
prompt fully traced plus 32 decode steps, above the loaded model (after its first forward).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

TEXT = ("The history of science is the study of the development of science and scientific knowledge, "
        "including both the natural and social sciences. Science is a body of empirical, theoretical, and "
        "practical knowledge about the natural world, produced by scientists who emphasize the observation, "
        "explanation, and prediction of real-world phenomena. ")


def prompt_ids(tokenizer, n: int) -> list[int]:
    ids = tokenizer.encode(TEXT)
    return (ids * (n // len(ids) + 1))[:n]


def time_session(loaded, ids: list[int], steps: int, **kw) -> tuple[float, float]:
    """(prefill seconds, decode tok/s) of a Session (greedy)."""
    from inspector.config import SamplingParams
    from inspector.session import Session

    s = Session(loaded, **kw)
    p = SamplingParams()
    t0 = time.perf_counter()
    s.prefill_ids(ids, p, max_new_tokens=steps + 1)
    t1 = time.perf_counter()
    for _ in range(steps):
        s.step(p)
    return t1 - t0, steps / (time.perf_counter() - t1)


def time_hf(hf, ids: list[int], steps: int) -> tuple[float, float]:
    """(prefill seconds, decode tok/s) of transformers generate: (t(steps + 1) - t(1)) over steps tokens."""
    x = torch.tensor([ids])
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        t0 = time.perf_counter()
        hf.generate(x, max_new_tokens=1, min_new_tokens=1, **kw)
        t1 = time.perf_counter()
        hf.generate(x, max_new_tokens=steps + 1, min_new_tokens=steps + 1, **kw)
        t2 = time.perf_counter()
    return t1 - t0, steps / ((t2 - t1) - (t1 - t0))


RSS_CHILD = r"""
import json, torch
torch.set_num_threads(2)
from inspector.loader import load_model
from inspector.session import Session
from inspector.config import SamplingParams
from bench.engine import prompt_ids
def rss():
    d = {l.split(':')[0]: int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith(('VmRSS', 'VmHWM'))}
    return d['VmRSS'], d['VmHWM']
m = load_model()
with torch.inference_mode():
    m.model(torch.tensor([[1, 2, 3, 4]]))
base, base_peak = rss()
s = Session(m, record=%s)
p = SamplingParams()
s.prefill_ids(prompt_ids(m.tokenizer, 2048), p, max_new_tokens=64)
for _ in range(32):
    s.step(p)
now, peak = rss()
print(json.dumps({"base": base, "base_peak": base_peak, "now": now, "peak": peak}))
"""


def rss_child(record: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", RSS_CHILD % record], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16, help="decode steps per measurement (no-cache: a quarter)")
    args = ap.parse_args()
    torch.set_num_threads(2)

    import transformers

    from inspector.loader import load_model

    fp32 = load_model()
    bf16 = load_model(dtype=torch.bfloat16)
    hf = transformers.LlamaForCausalLM.from_pretrained(fp32.weights_path, dtype=torch.float32).eval()
    configs = {
        "ours fp32, no recorder": lambda ids, n: time_session(fp32, ids, n, record=False),
        "ours fp32, full recorder": lambda ids, n: time_session(fp32, ids, n, record=True),
        "ours fp32, recorder, lens on demand": lambda ids, n: time_session(fp32, ids, n, record=True, lens=False),
        "ours fp32, --no-cache": lambda ids, n: time_session(fp32, ids, max(2, n // 4), recompute=True, record=False),
        "ours bf16, no recorder": lambda ids, n: time_session(bf16, ids, n, record=False),
        "transformers generate fp32": lambda ids, n: time_hf(hf, ids, n),
    }
    ctxs = (128, 512)
    prompts = {n: prompt_ids(fp32.tokenizer, n) for n in ctxs}
    for name, fn in configs.items():  # warm up: fault in the weights, size the allocator
        fn(prompts[128], 2)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for n in ctxs:
            for name, fn in configs.items():
                results.setdefault((name, n), []).append(fn(prompts[n], args.steps))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(name: str, n: int, i: int) -> float:
        return statistics.median(x[i] for x in results[(name, n)])

    base = {n: med("ours fp32, no recorder", n, 1) for n in ctxs}
    print(f"\n{args.rounds} rounds, median; decode = {args.steps} steps (no-cache: {max(2, args.steps // 4)}); "
          f"torch threads {torch.get_num_threads()}\n")
    print("| configuration | prefill 128 (s) | prefill 512 (s) | decode tok/s ctx 128 | decode tok/s ctx 512 "
          "| vs ours fp32 unrecorded, ctx 128 / 512 |")
    print("|---|---|---|---|---|---|")
    for name in configs:
        d = [med(name, n, 1) for n in ctxs]
        print(f"| {name} | {med(name, 128, 0):.3f} | {med(name, 512, 0):.3f} | {d[0]:.1f} | {d[1]:.1f} "
              f"| {d[0] / base[128]:.2f}x / {d[1] / base[512]:.2f}x |")

    traced, plain = rss_child(True), rss_child(False)
    print("\n| memory (2,048-token prompt + 32 decode steps) | RSS loaded model (MB) | peak RSS (MB) "
          "| peak above loaded (MB) | RSS at end above loaded (MB) |")
    print("|---|---|---|---|---|")
    for name, m in (("fully traced", traced), ("no recorder", plain)):
        print(f"| {name} | {m['base']:.0f} | {m['peak']:.0f} | {m['peak'] - m['base']:.0f} | {m['now'] - m['base']:.0f} |")


if __name__ == "__main__":
    main()
