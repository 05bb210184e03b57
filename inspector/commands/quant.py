"""`inspector quant --prompt TEXT [--chat] [--system S] --quant SCHEME [--kv-quant int8] --max-new-tokens N [--json]`:
how far a quantized copy of the model strays from the fp32 model, teacher-forced on the same tokens.

The fp32 model continues the prompt greedily for N tokens; the quantized model (SCHEME: bf16, int8,
int4 or int4:GROUP; see `inspector.quant.schemes`) is fed the same prompt and tokens. `--json` prints one
object: scheme, kv, weight_bytes, fp32_weight_bytes, positions, kl_mean, kl_max, top1_agreement,
first_divergence_step (null when greedy outputs never differ) and layers [{layer, resid_cos_min}]. The
command is `inspector.load(...).quant(...)` (`inspector.api.analyses.quant`).
"""

from __future__ import annotations

import argparse
import json

from inspector.api.analyses import check_prompt, check_quant
from inspector.commands.flags import chat_flags, json_flags, max_new_tokens_flags, model_flags, prompt_flags
from inspector.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("quant", help="fidelity of a quantized model against fp32 (KL, top-1, residuals)",
                              description=__doc__.split("\n\n")[0],
                              parents=[prompt_flags(), chat_flags(), max_new_tokens_flags(32), model_flags(),
                                       json_flags()])
    p.add_argument("--quant", required=True, metavar="SCHEME", help="bf16 | int8 | int4 | int4:GROUP (default group 32)")
    p.add_argument("--kv-quant", default=None, metavar="KV", help="KV cache precision: fp32 (default) | int8")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    check_quant(args.quant, args.kv_quant)  # bad input fails before the model loads
    check_prompt(args.prompt)
    from inspector.api.model import load

    rec = load(args.model, device=args.device).quant(args.prompt, quant=args.quant, kv_quant=args.kv_quant,
                                                     chat=args.chat, system=args.system,
                                                     max_new_tokens=args.max_new_tokens, names="flags")
    if args.json:
        print(json.dumps(rec.summary()))
        return 0
    div = "never" if rec.first_divergence_step is None else f"step {rec.first_divergence_step}"
    print(f"{rec.label} weights ({format_bytes(rec.weight_bytes)}, {rec.weight_bytes / rec.fp32_weight_bytes:.2f}x "
          f"of fp32's {format_bytes(rec.fp32_weight_bytes)}), KV cache {rec.kv}")
    print(f"{rec.positions} positions teacher-forced: KL mean {rec.kl_mean:.4g} nats, max {rec.kl_max:.4g}; "
          f"top-1 agreement {rec.top1_agreement:.3f}; greedy output diverges: {div}")
    print("step  token              KL         top-1")
    for s in rec.steps:
        top1 = "=" if s.top1_agree else "x " + repr(s.quant_top.pieces[0][:16])
        print(f"{s.step:>4}  {s.piece[:16]!r:<18} {s.kl:<10.4g} {top1}")
    worst = min(rec.layers, key=lambda x: x.resid_cos_min)
    print(f"residual cosine: lowest {worst.resid_cos_min:.5f} after layer {worst.layer}")
    return 0


