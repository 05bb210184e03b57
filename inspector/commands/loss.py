"""`inspector loss --text-file F [--grad-norms] [--json]`: a text teacher-forced through the model, as training
scores it (`inspector.analysis.training`).

Every token after the first is predicted from the tokens before it; the loss of that prediction is its
cross-entropy, -log p(token) in nats. `--grad-norms` adds one backward pass of the mean loss (no weight
changes): the gradient's L2 norm per weight and per layer, and the memory of inference beside one training
step (measured, or by formula for Adam's moments).

`--json` prints one object: token_ids, losses (one per predicted token: len(token_ids) - 1), mean_loss,
perplexity (exp(mean_loss)); with `--grad-norms` also grad_norms (HF parameter name -> norm),
layer_grad_norms (per layer) and memory ({"inference": [...], "training_step": [...]}, each part
{label, bytes, how: measured | formula}).
"""

from __future__ import annotations

import argparse
import json

from inspector.commands.flags import json_flags, model_flags
from inspector.commands.kv_eval import read_text
from inspector.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("loss", help="per-token cross-entropy and perplexity of a text; --grad-norms: one backward",
                              description=__doc__.split("\n\n")[0], parents=[model_flags(), json_flags()])
    p.add_argument("--text-file", required=True, metavar="F", help="a UTF-8 text file, teacher-forced")
    p.add_argument("--grad-norms", action="store_true",
                   help="also one backward pass: gradient norms per weight and layer, training-step memory")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    text = read_text(args.text_file)  # missing, empty, non-UTF-8: before the model loads

    from inspector.api.model import load

    result = load(args.model, device=args.device).loss(text, grad_norms=args.grad_norms, names="flags")  # Model.loss
    step = result if args.grad_norms else None
    losses = result.losses if args.grad_norms else result
    out = result.to_json()
    pieces = losses.pieces
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{len(losses.token_ids)} tokens, {len(losses.losses)} predicted: mean loss {losses.mean_loss:.4f} nats, "
          f"perplexity {losses.perplexity:.2f}")
    worst = sorted(range(len(losses.losses)), key=lambda t: -losses.losses[t])[:5]
    print("hardest tokens: " + ", ".join(f"{pieces[t + 1]!r} {losses.losses[t]:.2f}" for t in worst))
    if step is not None:
        for i, n in enumerate(step.layer_norms):
            print(f"layer {i:2d} gradient norm {n:.4g}")
        for side, parts in (("inference", step.inference_memory), ("training step", step.training_memory)):
            total = sum(m.bytes for m in parts)
            print(f"{side}: {format_bytes(total)} = " + " + ".join(f"{m.label} {format_bytes(m.bytes)} ({m.how})" for m in parts))
    return 0


