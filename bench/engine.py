"""Engine speed and memory on the default model: prefill, decode tok/s, recorder cost, cache vs no cache,
bf16, and transformers `generate` (fp32, same weights) as the peer. Prints a markdown table.

Run: python bench/engine.py [--rounds 5] [--chunk 8]
Same process, same machine, 2 threads. The machine may be shared, so configurations take turns in short
chunks, round after round, and medians of per-step times are reported: a burst of load elsewhere hits
a few steps of every configuration rather than all steps of one. Decode tok/s is wall time per step,
everything included (forward, sampling, building the record); transformers' per-step times come from
a streamer noting when each token of one `generate` call arrives. RSS is measured in a fresh subprocess: a 2,048-token
prompt fully traced plus 32 decode steps, above the loaded model (after its first forward).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runs from a checkout without `pip install -e .` too

TEXT = ("The history of science is the study of the development of science and scientific knowledge, "
        "including both the natural and social sciences. Science is a body of empirical, theoretical, and "
        "practical knowledge about the natural world, produced by scientists who emphasize the observation, "
        "explanation, and prediction of real-world phenomena. ")


def prompt_ids(tokenizer, n: int) -> list[int]:
    ids = tokenizer.encode(TEXT)
    return (ids * (n // len(ids) + 1))[:n]


def step_times(session, params, n: int) -> list[float]:
    """Wall seconds of each of n decode steps (forward, sampling and record building)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        session.step(params)
        out.append(time.perf_counter() - t0)
    return out


class Stamps:
    """A transformers streamer that only notes when each token arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_times(hf, ids: list[int], n: int) -> tuple[float, list[float]]:
    """(prefill seconds, per-step decode seconds) of one transformers `generate` call of n + 1 tokens."""
    stamps = Stamps()
    with torch.no_grad():
        t0 = time.perf_counter()
        hf.generate(torch.tensor([ids]), max_new_tokens=n + 1, min_new_tokens=n + 1, do_sample=False,
                    eos_token_id=None, pad_token_id=0, streamer=stamps)
    t = stamps.times  # [prompt, token 1 (after prefill), token 2, ...]
    return t[1] - t0, [b - a for a, b in zip(t[1:], t[2:])]


RSS_CHILD = r"""
import json, torch
torch.set_num_threads(2)
from inspector.models.loader import load_model
from inspector.session.session import Session
from inspector.engine.config import SamplingParams
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
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=8, help="decode steps per configuration per round (no-cache: a quarter)")
    args = ap.parse_args()
    torch.set_num_threads(2)

    import transformers

    from inspector.engine.config import SamplingParams
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    fp32 = load_model()
    bf16 = load_model(dtype=torch.bfloat16)
    hf = transformers.LlamaForCausalLM.from_pretrained(fp32.weights_path, dtype=torch.float32).eval()
    configs = {  # name -> (loaded model, Session keywords, steps per chunk divisor)
        "ours fp32, no recorder": (fp32, dict(record=False), 1),
        "ours fp32, full recorder": (fp32, dict(record=True), 1),
        "ours fp32, recorder, lens on demand": (fp32, dict(record=True, lens=False), 1),
        "ours fp32, --no-cache": (fp32, dict(recompute=True, record=False), 4),
        "ours bf16, no recorder": (bf16, dict(record=False), 1),
    }
    HF = "transformers generate fp32"
    params = SamplingParams()
    ctxs = (128, 512)
    prefill_s: dict[tuple[str, int], list[float]] = {}
    decode_s: dict[tuple[str, int], list[float]] = {}
    for n in ctxs:
        ids = prompt_ids(fp32.tokenizer, n)
        sessions = {name: Session(loaded, **kw) for name, (loaded, kw, _) in configs.items()}
        for r in range(args.rounds + 1):  # round 0 warms up (weights faulted in, allocator sized)
            for name, s in sessions.items():
                t0 = time.perf_counter()
                s.prefill_ids(ids, params, max_new_tokens=10_000)
                dt = time.perf_counter() - t0
                steps = step_times(s, params, max(1, args.chunk // configs[name][2]))
                if r:
                    prefill_s.setdefault((name, n), []).append(dt)
                    decode_s.setdefault((name, n), []).extend(steps)
            dt, steps = hf_times(hf, ids, args.chunk)
            if r:
                prefill_s.setdefault((HF, n), []).append(dt)
                decode_s.setdefault((HF, n), []).extend(steps)
            print(f"ctx {n}: round {r}/{args.rounds} done", file=sys.stderr)

    med = statistics.median
    names = [*configs, HF]
    base = {n: med(decode_s[(names[0], n)]) for n in ctxs}
    print(f"\nmedians over {args.rounds} interleaved rounds (prefill: one per round; decode: per-step times, "
          f"{args.chunk} steps per round, no-cache {max(1, args.chunk // 4)}); torch threads "
          f"{torch.get_num_threads()}; load average at the end {os.getloadavg()[0]:.1f}\n")
    print("| configuration | prefill 128 (s) | prefill 512 (s) | decode tok/s ctx 128 | decode tok/s ctx 512 "
          "| decode speed vs ours fp32 unrecorded, ctx 128 / 512 |")
    print("|---|---|---|---|---|---|")
    for name in names:
        d = {n: med(decode_s[(name, n)]) for n in ctxs}
        print(f"| {name} | {med(prefill_s[(name, 128)]):.3f} | {med(prefill_s[(name, 512)]):.3f} "
              f"| {1 / d[128]:.1f} | {1 / d[512]:.1f} | {base[128] / d[128]:.2f}x / {base[512] / d[512]:.2f}x |")

    traced, plain = rss_child(True), rss_child(False)
    print("\n| memory (2,048-token prompt + 32 decode steps) | RSS loaded model (MB) | peak RSS (MB) "
          "| peak above loaded (MB) | RSS at end above loaded (MB) |")
    print("|---|---|---|---|---|")
    for name, m in (("fully traced", traced), ("no recorder", plain)):
        print(f"| {name} | {m['base']:.0f} | {m['peak']:.0f} | {m['peak'] - m['base']:.0f} | {m['now'] - m['base']:.0f} |")


if __name__ == "__main__":
    main()
