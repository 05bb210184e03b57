"""Engine speed on the default model, with its peers measured in the same run; prints markdown tables.

Run: python -m bench.engine [--rounds 5] [--chunk 8] [--goals] [--profile fp32|bf16|fp32-rec] [--ops] [--compile]
     [--no-rss] [--no-matmuls]

The speed goals come last, each a ratio measured in this run, with the spread of its per-round ratios:
fp32 decode >= 1.5x transformers' generate and bf16 decode >= 2x fp32 decode (both with no recorder),
met or not. `--goals` runs only the three rows they need (quicker on a busy machine). The per-product table
(bench/products.py) gives each kind of weight product's GB/s against the copy bandwidth measured in the
same run. `--compile` measures `torch.compile` of the decode step instead (bench/compile_step.py says why the
engine does not offer it).

`--ops` prints only the per-operation table (bench/ops.py): a decode step's time per operation (qkv,
attention, o, gate/up, down, norms, LM head, sampling) with the bytes each reads and its GB/s against the
machine's measured read bandwidth, fp32 and bf16 side by side.

Rows: our fp32 decode without a recorder (weights in the app's decode layout, see
inspector.models.loader), the same in the batch layout, with the summary recorder (logit lens on demand, i.e. not
computed), with the summary recorder and the lens every step, without the KV cache (recompute), bf16
without a recorder, and transformers' `generate` fp32 on the same weights. Decode tok/s is wall time per
step, everything included: forward, reading the recorder's summaries, the lens when on, and choosing the
token (greedy argmax, as `generate` does; one row uses the app's `sample()`, which also builds every
distribution it shows); transformers' per-step times come from a streamer noting when each token of one
`generate` call arrives. bf16's logit error against fp32 is measured on the same tokens
(teacher-forced): max |logit diff| and KL(fp32 || bf16) per position, over a prefill and 16 steps.

The machine may be shared, so configurations take turns in short chunks, round after round: a burst of
load elsewhere hits a few steps of every configuration rather than all steps of one. Two tables: medians
of the per-step times, and the fastest tenth of them (what a step costs when the cores are free; with two
torch threads on two busy cores, a step can wait on a descheduled worker). `--threads 1 --clock cpu`
times CPU time instead of wall time, which other processes barely move. Compare ratios within one run,
not absolute numbers across runs. RSS is measured
in a fresh subprocess: a 2,048-token prompt traced by the summary recorder plus 32 decode steps, above
the loaded model (after its first forward; the peak is reset there, so loading's transient peak, when the
mapped file and the laid-out copies are both resident, is not counted). `--profile` prints where a decode step's time goes instead.

The matmul table streams every weight matrix of the model once (a decode step's products: stacked q/k/v,
o, stacked gate/up, down, LM head) with M rows of input, in each form the engine could use: F.linear on
weights stored (out, in) (what transformers runs), `W @ x.T` on the same storage, F.linear on weights
stored (in, out), and bf16 F.linear. GB/s is weight bytes over time; it bounds decode speed from above,
and bf16's half-size weights bound its decode speedup over fp32 by the ratio of these rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from inspector.units import MIB

ROOT = Path(__file__).resolve().parent.parent  # the RSS child runs here, so `bench.engine` imports in it

TEXT = ("The history of science is the study of the development of science and scientific knowledge, "
        "including both the natural and social sciences. Science is a body of empirical, theoretical, and "
        "practical knowledge about the natural world, produced by scientists who emphasize the observation, "
        "explanation, and prediction of real-world phenomena. ")
THREADS = 2
clock = time.perf_counter  # --clock cpu: time.thread_time (with one thread: CPU time, blind to other processes)


def fast(times: list[float]) -> float:
    """The fastest tenth's slowest time: what a step takes when nothing else holds the cores."""
    return sorted(times)[len(times) // 10]


def prompt_ids(tokenizer, n: int) -> list[int]:
    ids = tokenizer.encode(TEXT)
    return (ids * (n // len(ids) + 1))[:n]


class Ours:
    """One configuration of our engine: a model, whether to record, lens every step, KV cache or not."""

    def __init__(self, loaded, record: bool = False, lens: bool = False, cached: bool = True,
                 sampler: bool = False) -> None:
        self.loaded, self.record, self.lens, self.cached = loaded, record, lens, cached
        self.sampler = sampler  # True: the app's sample() (all its distributions); False: argmax, as generate

    def _forward(self, ids: list[int], fresh: bool) -> torch.Tensor:
        from inspector.engine import steps as engine
        from inspector.engine.recording import SummaryRecorder

        model = self.loaded.model
        L = model.config.num_hidden_layers
        rec = SummaryRecorder(L, keep=None if self.cached or fresh else 1) if self.record else None
        if fresh:
            self.cache = engine.new_cache(model)
            logits = engine.prefill(model, ids, self.cache, rec)
        elif self.cached:
            logits = engine.decode_step(model, ids[-1], self.cache, rec)
        else:
            logits, self.cache = engine.recompute_step(model, ids, rec)
        if rec is not None:
            rec.norm_arrays(), rec.queries()
            resid = rec.lens_inputs()
            if self.lens:
                with torch.inference_mode():
                    lens = torch.cat([model.unembed(resid[:-1]).float(), logits[None]])  # (layers, V)
                    torch.topk(lens, 5, dim=-1), torch.logsumexp(lens, dim=-1)
        return logits

    def prefill(self, ids: list[int]) -> float:
        t0 = clock()
        self.ids = list(ids)
        self._next(self._forward(self.ids, fresh=True))
        return clock() - t0

    def steps(self, n: int) -> list[float]:
        """Wall seconds of each of n decode steps (forward, summaries, lens when on, sampling)."""
        out = []
        for _ in range(n):
            t0 = clock()
            self._next(self._forward(self.ids, fresh=False))
            out.append(clock() - t0)
        return out

    def _next(self, logits: torch.Tensor) -> None:
        from inspector.engine.config import SamplingParams
        from inspector.engine.sampling import generator_for, sample

        if not self.sampler:
            self.ids.append(int(logits.argmax()))
            return
        params = SamplingParams()  # greedy, through every stage the app records
        self.ids.append(sample(logits, params, generator_for(params.seed, len(self.ids))).token)


def weight_groups(model) -> list[torch.Tensor]:
    """The weight matrices one decode step multiplies by, as the engine groups them (N, K) each, in its order."""
    from bench.products import product_groups, step_order

    return step_order(product_groups(model))


def matmul_table(decode, batch, bf16, rounds: int = 7) -> None:
    """Every weight matrix once, M rows of input, by form and storage (see the module doc), on the fp32
    models in the decode and batch layouts and the bf16 model the decode rows ran."""
    forms = {  # name -> (weights, product)
        "fp32 F.linear, stored (out, in) (transformers' form)": (weight_groups(batch.model), torch.nn.functional.linear),
        "fp32 W @ x.T, stored (out, in) (ours, batch layout, M >= 2)": (weight_groups(batch.model), lambda x, w: torch.mm(w, x.t())),
        "fp32 F.linear, stored (in, out) (ours, decode layout)": (weight_groups(decode.model), torch.nn.functional.linear),
        "bf16 F.linear, stored (out, in)": (weight_groups(bf16.model), torch.nn.functional.linear),
    }
    ms = (1, 2, 8)
    print("\n| weight products, all matrices once | bytes (MiB) | " + " | ".join(f"M={m} ms (GB/s)" for m in ms) + " |")
    print("|---|---|" + "---|" * len(ms))
    with torch.inference_mode():
        for name, (weights, product) in forms.items():
            nbytes = sum(w.numel() * w.element_size() for w in weights)
            cells = []
            for m in ms:
                xs = {k: torch.randn(m, k, dtype=weights[0].dtype) for k in {w.shape[1] for w in weights}}
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for w in weights:
                        product(xs[w.shape[1]], w)
                    times.append(time.perf_counter() - t0)
                t = statistics.median(times[1:])
                cells.append(f"{t * 1e3:.1f} ({nbytes / t / 1e9:.1f})")
            print(f"| {name} | {nbytes / MIB:.0f} | " + " | ".join(cells) + " |")


class Stamps:
    """A transformers streamer that only notes when each token arrives (the first put is the prompt), read
    from `timer` (default: this module's `clock`, which `--clock` sets)."""

    def __init__(self, timer: Callable[[], float] | None = None) -> None:
        self.timer = clock if timer is None else timer
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(self.timer())

    def end(self) -> None:
        pass


def hf_times(hf, ids: list[int], n: int) -> tuple[float, list[float]]:
    """(prefill seconds, per-step decode seconds) of one transformers `generate` call of n + 1 tokens."""
    stamps = Stamps()
    with torch.no_grad():
        t0 = clock()
        hf.generate(torch.tensor([ids]), max_new_tokens=n + 1, min_new_tokens=n + 1, do_sample=False,
                    eos_token_id=None, pad_token_id=0, streamer=stamps)
    t = stamps.times  # [prompt, token 1 (after prefill), token 2, ...]
    return t[1] - t0, [b - a for a, b in zip(t[1:], t[2:])]


@torch.inference_mode()
def bf16_error(fp32, bf16, ids: list[int], steps: int = 16) -> tuple[float, float, float]:
    """(max |logit diff|, mean KL, max KL) of bf16 vs fp32 on the same tokens: a prefill, then `steps`
    decode steps feeding fp32's greedy tokens to both."""
    from inspector.engine import steps as engine

    caches = [engine.new_cache(m.model) for m in (fp32, bf16)]
    rows = [[engine.prefill(m.model, ids, c) for m, c in zip((fp32, bf16), caches)]]
    for _ in range(steps):
        tok = int(rows[-1][0].argmax())
        rows.append([engine.decode_step(m.model, tok, c) for m, c in zip((fp32, bf16), caches)])
    a = torch.stack([r[0] for r in rows])  # (steps + 1, V) fp32 logits
    b = torch.stack([r[1] for r in rows])
    kl = (a.log_softmax(-1).exp() * (a.log_softmax(-1) - b.log_softmax(-1))).sum(-1)  # (steps + 1,)
    return float((a - b).abs().max()), float(kl.mean()), float(kl.max())


RSS_CHILD = r"""
import json, torch
torch.set_num_threads(%d)
from inspector.models.loader import load_model
from bench.engine import Ours, prompt_ids
def rss():
    d = {l.split(':')[0]: int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith(('VmRSS', 'VmHWM'))}
    return d['VmRSS'], d['VmHWM']
m = load_model()
with torch.inference_mode():
    m.model(torch.tensor([[1, 2, 3, 4]]))
base, base_peak = rss()
open('/proc/self/clear_refs', 'w').write('5')  # reset the peak: loading's own transient peak is not the trace's
ours = Ours(m, record=%s)
ours.prefill(prompt_ids(m.tokenizer, 2048))
ours.steps(32)
now, peak = rss()
print(json.dumps({"base": base, "base_peak": base_peak, "now": now, "peak": peak}))
"""


def rss_child(record: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", RSS_CHILD % (THREADS, record)], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


FP32, BF16 = "ours fp32, no recorder", "ours bf16, no recorder"
HF = "transformers generate fp32"
GOALS = (  # (what, faster configuration, peer, at least)
    ("fp32 decode vs transformers generate", FP32, HF, 1.5),
    ("bf16 decode vs fp32 decode", BF16, FP32, 2.0),
)


def print_goals(decode_s: dict, rounds_s: dict, ctxs: tuple[int, ...],
                products: dict[str, float] | None = None) -> None:
    """Each speed goal per context: the ratio of median decode steps, the spread of the per-round ratios
    (each round's median steps), and whether the median meets it. With `products` (seconds of a step's
    weight products alone, per dtype), what the bf16 goal leaves for the rest of a bf16 step."""
    print(f"\nspeed goals (torch {torch.__version__}, {torch.get_num_threads()} threads, load average now "
          f"{os.getloadavg()[0]:.1f}; the bf16 goal is for the torch a plain pip install brings)\n")
    print("| goal | ctx | ratio of medians | per-round spread | fastest tenth | met |")
    print("|---|---|---|---|---|---|")
    for what, ours, peer, bar in GOALS:
        for n in ctxs:
            ratio = statistics.median(decode_s[(peer, n)]) / statistics.median(decode_s[(ours, n)])
            per_round = [p / o for p, o in zip(rounds_s[(peer, n)], rounds_s[(ours, n)])]
            quiet = fast(decode_s[(peer, n)]) / fast(decode_s[(ours, n)])
            print(f"| {what} >= {bar}x | {n} | {ratio:.2f}x | {min(per_round):.2f}-{max(per_round):.2f}x "
                  f"| {quiet:.2f}x | {'yes' if ratio >= bar else 'no'} |")
    if not products:
        return
    print("\n| where a decode step's time goes (ctx 128, medians) | fp32 | bf16 |\n|---|---|---|")
    steps = {name: statistics.median(decode_s[(label, 128)]) for name, label in (("fp32", FP32), ("bf16", BF16))}
    print(f"| whole step | {steps['fp32'] * 1e3:.2f} ms | {steps['bf16'] * 1e3:.2f} ms |")
    print(f"| its weight products alone (every matrix once, in step order) | {products['fp32'] * 1e3:.2f} ms "
          f"| {products['bf16'] * 1e3:.2f} ms |")
    print(f"| the rest (norms, RoPE, attention, cache writes, casts, sampling, Python) | "
          f"{(steps['fp32'] - products['fp32']) * 1e3:.2f} ms | {(steps['bf16'] - products['bf16']) * 1e3:.2f} ms |")
    room, rest = steps["fp32"] / 2 - products["bf16"], steps["bf16"] - products["bf16"]
    print(f"\nbf16 at 2x this fp32 step may take {steps['fp32'] / 2 * 1e3:.2f} ms: {products['bf16'] * 1e3:.2f} ms of "
          f"weight products leave {room * 1e3:.2f} ms for the rest, which takes {rest * 1e3:.2f} ms now; the products "
          f"alone run {products['fp32'] / products['bf16']:.2f}x faster in bf16, and any time the two dtypes share "
          "pulls the step ratio below that.")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.engine")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=8, help="decode steps per configuration per round (no-cache: a quarter)")
    ap.add_argument("--profile", choices=["fp32", "bf16", "fp32-rec"], help="profile decode steps instead")
    ap.add_argument("--ops", action="store_true", help="print the per-operation table (fp32 and bf16) instead")
    ap.add_argument("--goals", action="store_true",
                    help="only the rows the speed goals compare (ours fp32 and bf16, transformers), then the goals")
    ap.add_argument("--compile", choices=["fp32", "bf16"], help="measure torch.compile of the decode step instead")
    ap.add_argument("--no-rss", action="store_true", help="skip the memory table")
    ap.add_argument("--no-matmuls", action="store_true", help="skip the weight-products table")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="torch threads (default: 2, the vCPUs of the CPU Basic Space the demo runs on)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: CPU time of the calling thread (needs --threads 1, where it is all the work)")
    args = ap.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        ap.error("--clock cpu measures one thread: use it with --threads 1")
    global clock
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)

    from inspector.models.loader import load_model

    fp32 = load_model()
    if args.profile:
        from bench.profile_step import profile

        loaded = fp32 if args.profile != "bf16" else load_model(dtype=torch.bfloat16)
        profile(Ours(loaded, record=args.profile == "fp32-rec"), prompt_ids(fp32.tokenizer, 128))
        return
    if args.ops:
        from bench.ops import print_ops_table

        print_ops_table(fp32, load_model(dtype=torch.bfloat16), prompt_ids(fp32.tokenizer, 128))
        return
    if args.compile:
        from bench.compile_step import print_compile_table

        model = fp32 if args.compile == "fp32" else load_model(dtype=torch.bfloat16)
        print_compile_table(model, prompt_ids(fp32.tokenizer, 128), args.rounds, args.chunk)
        return
    import transformers

    bf16 = load_model(dtype=torch.bfloat16)
    fp32_batch = None if args.goals else load_model(layout="batch")
    hf = transformers.LlamaForCausalLM.from_pretrained(fp32.weights_path, dtype=torch.float32).eval()
    configs = {  # name -> (our configuration, steps per chunk divisor)
        FP32: (Ours(fp32), 1),
        "ours fp32, batch layout, no recorder": (Ours(fp32_batch), 1),
        "ours fp32, summary recorder, lens on demand": (Ours(fp32, record=True), 1),
        "ours fp32, summary recorder, lens every step": (Ours(fp32, record=True, lens=True), 1),
        "ours fp32, summary recorder, lens on demand, the app's sample()": (Ours(fp32, record=True, sampler=True), 1),
        "ours fp32, no KV cache (recompute)": (Ours(fp32, cached=False), 4),
        BF16: (Ours(bf16), 1),
    }
    if args.goals:
        configs = {name: configs[name] for name in (FP32, BF16)}
    ctxs = (128, 512)
    prefill_s: dict[tuple[str, int], list[float]] = {}
    decode_s: dict[tuple[str, int], list[float]] = {}
    rounds_s: dict[tuple[str, int], list[float]] = {}  # per round, the median decode step
    for n in ctxs:
        ids = prompt_ids(fp32.tokenizer, n)
        for r in range(args.rounds + 1):  # round 0 warms up (weights faulted in, allocator sized)
            for name, (ours, div) in configs.items():
                dt = ours.prefill(ids)
                steps = ours.steps(max(1, args.chunk // div))
                if r:
                    prefill_s.setdefault((name, n), []).append(dt)
                    decode_s.setdefault((name, n), []).extend(steps)
                    rounds_s.setdefault((name, n), []).append(statistics.median(steps))
            dt, steps = hf_times(hf, ids, args.chunk)
            if r:
                prefill_s.setdefault((HF, n), []).append(dt)
                decode_s.setdefault((HF, n), []).extend(steps)
                rounds_s.setdefault((HF, n), []).append(statistics.median(steps))
            print(f"ctx {n}: round {r}/{args.rounds} done", file=sys.stderr)
    max_err, kl_mean, kl_max = bf16_error(fp32, bf16, prompt_ids(fp32.tokenizer, 128))

    med = statistics.median
    names = [*configs, HF]
    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"{args.clock} clock; "
          f"{args.rounds} interleaved rounds (prefill: one per round; decode: per-step times, {args.chunk} steps "
          f"per round, no-cache {max(1, args.chunk // 4)}); load average at the end {os.getloadavg()[0]:.1f}")
    for label, stat in (("medians", med), ("fastest tenth of the steps (robust to other processes' load)", fast)):
        base = {n: stat(decode_s[(names[0], n)]) for n in ctxs}
        hf_base = {n: stat(decode_s[(HF, n)]) for n in ctxs}
        print(f"\n{label}\n")
        print("| configuration | prefill 128 (s) | prefill 512 (s) | decode tok/s ctx 128 | decode tok/s ctx 512 "
              "| decode vs ours fp32 unrecorded, ctx 128 / 512 | decode vs transformers, ctx 128 / 512 |")
        print("|---|---|---|---|---|---|---|")
        for name in names:
            d = {n: stat(decode_s[(name, n)]) for n in ctxs}
            note = (f" (logits vs fp32: max abs {max_err:.3f}, KL mean {kl_mean:.2e} / max {kl_max:.2e})"
                    if "bf16" in name else "")
            print(f"| {name}{note} | {stat(prefill_s[(name, 128)]):.3f} | {stat(prefill_s[(name, 512)]):.3f} "
                  f"| {1 / d[128]:.1f} | {1 / d[512]:.1f} | {base[128] / d[128]:.2f}x / {base[512] / d[512]:.2f}x "
                  f"| {hf_base[128] / d[128]:.2f}x / {hf_base[512] / d[512]:.2f}x |")
    if not args.no_matmuls and not args.goals:
        matmul_table(fp32, fp32_batch, bf16)
    from bench.products import print_product_table

    products = print_product_table(fp32, bf16, clock=clock)
    print_goals(decode_s, rounds_s, ctxs, products)
    if args.goals:
        return
    if args.no_rss:
        return
    traced, plain = rss_child(True), rss_child(False)
    print("\n| memory (2,048-token prompt + 32 decode steps) | RSS loaded model (MiB) | peak RSS (MiB) "
          "| peak above loaded (MiB) | RSS at end above loaded (MiB) |")
    print("|---|---|---|---|---|")
    for name, m in (("summary recorder", traced), ("no recorder", plain)):
        print(f"| {name} | {m['base']:.0f} | {m['peak']:.0f} | {m['peak'] - m['base']:.0f} | {m['now'] - m['base']:.0f} |")


if __name__ == "__main__":
    main()
