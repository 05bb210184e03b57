"""Quantization: weight bytes, decode speed and fidelity per scheme, fp32 as the peer in the same run;
then the low-bit kernels this torch has, timed on the model's own matrix shapes.

Run: python -m bench.quant [--schemes fp32,bf16,int8,int4:32,int4:64] [--kv fp32|int8] [--tokens 32]
     [--steps 16] [--rounds 3] [--threads N] [--model SOURCE]
     python -m bench.quant --quick   (two prompts, a few tokens and steps: a smoke test, not a measurement)

Table 1, per scheme: bytes its weights hold (packed values, scales, zeros; the shared fp32 norms counted)
and the ratio to fp32; decode tokens/s (the median step of a 16-token prompt's decode, schemes taking
turns in short chunks round after round, so load elsewhere on a shared machine hits all of them) and the
ratio to fp32; over PROMPTS, teacher-forced on fp32's greedy continuation of --tokens tokens: mean
KL(p_fp32 || p_quant) and top-1 agreement over all positions, and the median first greedy divergence.
Goals: int8 <= 0.3x of fp32's bytes with top-1 agreement >= 0.97; int4-g32 <= 0.2x.

Table 2, per matrix shape of one decode step (1 token): microseconds of fp32 `F.linear`, bf16 `F.linear`,
our int8 path (int8 -> fp32, matmul, scale), `aten._weight_int8pack_mm` (fp32 and bf16 activations), our
int4 path (unpack, scale+min, matmul), `aten._weight_int4pack_mm_for_cpu` (fp32 and bf16 activations),
each with the weights' GB/s (the bytes that form holds / time) and its ratio to fp32. This is what chose each scheme's compute path.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from inspector.engine import steps
from inspector.models.loader import load_model
from inspector.quant import packing
from inspector.quant.kv_int8 import new_kv_cache
from inspector.quant.lab import PATHS, QuantLab
from inspector.quant.model import weight_bytes
from inspector.quant.schemes import parse_scheme
from inspector.units import MIB

PROMPTS = [
    ("What is gravity?", True),
    ("Write a haiku about the sea.", True),
    ("The capital of France is", False),
    ("def fibonacci(n):", False),
    ("Explain how a KV cache speeds up decoding.", True),
]


def decode_times(model: torch.nn.Module, kv: str, n: int) -> list[float]:
    """Seconds of n greedy decode steps after a 16-token prompt."""
    cache = new_kv_cache(model, kv)
    with torch.inference_mode():
        token = int(steps.prefill(model, list(range(100, 116)), cache).argmax())
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            token = int(steps.decode_step(model, token, cache).argmax())
            out.append(time.perf_counter() - t0)
    return out


def us(fn, reps: int) -> float:
    """Median microseconds of fn() over `reps` calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def kernel_rows(n: int, k: int, reps: int) -> list[tuple[str, float, int]]:
    """(name, microseconds, weight bytes) of each way to multiply one token by an (n, k) matrix."""
    torch.manual_seed(0)
    w, x = torch.randn(n, k) * 0.02, torch.randn(1, k)
    wb, xb = w.bfloat16(), x.bfloat16()
    q8, s8 = packing.quantize_int8(w)
    p4, s4, z4 = packing.quantize_int4(w, 32)
    rows = [("fp32 F.linear", us(lambda: F.linear(x, w), reps), w.nbytes),
            ("bf16 F.linear", us(lambda: F.linear(xb, wb), reps), wb.nbytes),
            ("int8 ours (->fp32, matmul, scale)", us(lambda: F.linear(x, q8.float()) * s8, reps), q8.nbytes + s8.nbytes),
            ("int8 _weight_int8pack_mm", us(lambda: torch.ops.aten._weight_int8pack_mm(x, q8, s8), reps), q8.nbytes + s8.nbytes),
            ("int8 _weight_int8pack_mm, bf16 x",
             us(lambda: torch.ops.aten._weight_int8pack_mm(xb, q8, s8.bfloat16()), reps), q8.nbytes + s8.nbytes),
            ("int4 ours (unpack, scale+min, matmul)",
             us(lambda: F.linear(x, packing.dequantize_int4(p4, s4, z4)), reps), p4.nbytes + s4.nbytes + z4.nbytes)]
    try:
        q = packing.unpack_int4(p4).to(torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        # the kernel computes (q - 8) * scale + zero per group: our zero (the min) shifted by 8 scales
        sz = torch.stack((s4.float(), z4.float() + 8 * s4.float()), dim=-1).transpose(0, 1).contiguous()  # (G, n, 2)
        got = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz)
        want = F.linear(x, packing.dequantize_int4(p4, s4, z4))
        ok = "" if torch.allclose(got, want, atol=1e-3, rtol=1e-3) else " (WRONG RESULT)"
        nbytes = packed.nbytes + sz.nbytes
        rows.append((f"int4 _weight_int4pack_mm_for_cpu, fp32 x{ok}",
                     us(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz), reps), nbytes))
        szb = sz.bfloat16()
        rows.append(("int4 _weight_int4pack_mm_for_cpu, bf16 x",
                     us(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, 32, szb), reps), nbytes))
    except (RuntimeError, AttributeError) as exc:  # not built into this torch
        print(f"int4pack kernel unavailable: {str(exc).splitlines()[0]}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.quant", description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemes", default="fp32,bf16,int8,int4:32,int4:64")
    ap.add_argument("--kv", default="fp32", choices=("fp32", "int8"))
    ap.add_argument("--tokens", type=int, default=32, help="teacher-forced positions per prompt")
    ap.add_argument("--steps", type=int, default=16, help="timed decode steps per scheme and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = PROMPTS[:2] if args.quick else PROMPTS
    tokens, n_steps, rounds, reps = (4, 3, 1, 5) if args.quick else (args.tokens, args.steps, args.rounds, 200)
    loaded = load_model(args.model)
    lab = QuantLab(loaded)
    schemes = [parse_scheme(s) for s in args.schemes.split(",")]
    if schemes[0].weights != "fp32":
        schemes.insert(0, parse_scheme("fp32"))
    t0 = time.perf_counter()
    models = {s.name: lab.model(s) for s in schemes}
    print(f"built {len(schemes) - 1} quantized models in {time.perf_counter() - t0:.1f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; KV cache {args.kv}\n")

    times: dict[str, list[float]] = {s.name: [] for s in schemes}
    for _ in range(rounds):  # schemes take turns
        for s in schemes:
            times[s.name] += decode_times(models[s.name], args.kv, n_steps)
    fid: dict[str, list] = {s.name: [] for s in schemes}
    for text, chat in prompts:
        ids = loaded.tokenizer.encode(loaded.tokenizer.render_chat(text) if chat else text)
        for s in schemes:
            fid[s.name].append(lab.compare(ids, tokens, s.name, args.kv))

    base_bytes = weight_bytes(models["fp32"])
    base_tok_s = 1 / statistics.median(times["fp32"])
    print("| scheme | weight bytes | x fp32 | decode tok/s | x fp32 | KL mean (nats) | top-1 agreement "
          "| first divergence (median step) | compute |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for s in schemes:
        b, tok_s = weight_bytes(models[s.name]), 1 / statistics.median(times[s.name])
        recs = fid[s.name]
        positions = sum(r.positions for r in recs)
        kl = sum(r.kl_mean * r.positions for r in recs) / positions
        top1 = sum(r.top1_agreement * r.positions for r in recs) / positions
        divs = [r.first_divergence_step if r.first_divergence_step is not None else r.positions for r in recs]
        print(f"| {s.label} | {b / MIB:.1f} MiB | {b / base_bytes:.3f} | {tok_s:.1f} | {tok_s / base_tok_s:.2f} "
              f"| {kl:.4g} | {top1:.3f} | {statistics.median(divs):g} of {tokens} | {PATHS[s.weights]} |")
    print(f"\n{len(prompts)} prompts x up to {tokens} teacher-forced positions; decode: median of {rounds} x {n_steps} "
          "steps per scheme.\n")

    cfg = loaded.config
    shapes = [("q_proj", cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size),
              ("gate_proj", cfg.intermediate_size, cfg.hidden_size),
              ("down_proj", cfg.hidden_size, cfg.intermediate_size),
              ("LM head", cfg.vocab_size, cfg.hidden_size)]
    print("| matrix (n x k) | kernel | us per token | weight GB/s | x fp32 time |")
    print("|---|---|---:|---:|---:|")
    for name, n, k in shapes:
        if k % 32:
            continue
        rows = kernel_rows(n, k, max(5, reps // (20 if name == "LM head" else 1)))
        fp32_us = rows[0][1]
        for kernel, t, nbytes in rows:
            print(f"| {name} ({n} x {k}) | {kernel} | {t:.0f} | {nbytes / t / 1e3:.2f} | {t / fp32_us:.2f} |")


if __name__ == "__main__":
    main()
