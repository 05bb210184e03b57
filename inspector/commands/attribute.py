"""`inspector attribute --prompt TEXT [--chat] [--token TOKEN]`: direct logit attribution of the next token.

The next token's logit (the top-1, or TOKEN: a text that is exactly one token or #ID) split into the
embedding, every attention head, every o_proj bias and every MLP (`inspector.analysis.attribution`). The
parts add up because the final RMSNorm's scale 1/rms(x) is frozen at this position's value (and, on Gemma,
each post-attention norm's scale too, so each head's share passes through the same linear map): each part
is what it wrote to the residual stream read through those fixed maps, not what removing it would change.
On a family with a final soft-cap (Gemma 2) the parts sum to the logit before the cap, and the model's
logit is cap * tanh(sum / cap). On Granite the parts include its multipliers (the embedding's, the
residual one on each attention and MLP output) and its division of the logits by logits_scaling.

`--json` prints {"token_id", "piece",
 "logit": the model's logit (after the soft-cap, when there is one),
 "logit_precap": the logit the parts sum to (before the soft-cap; equal to "logit" without one),
 "softcap": the cap or null, "decomposes": "logit" or "pre-cap logit",
 "frozen_scales": {"final_norm_rms": rms of the final residual at this position,
                   "post_attention_norm_rms": per layer, rms of o_proj's output (Gemma), else null},
 "multipliers": {"embedding_multiplier", "residual_multiplier", "logits_scaling"} the parts include (Granite),
                else null,
 "embed", "layers": [{"heads": [...], "mlp": x, "attn_bias": x, "attn_rest": x}, ...], "other",
 "sum": the sum of every part, "interventions"}
(attn_rest and other are what interventions added; 0 up to rounding without any). Without it, the
equation and the largest parts are listed. The command is `inspector.load(...).attribute(...)`
(`inspector.api.analyses.attribute`) with its flags as keywords.
"""

from __future__ import annotations

import argparse
import json

from inspector.api.analyses import check_prompt
from inspector.commands.flags import chat_flags, json_flags, model_flags, prompt_flags

SHOWN = 15


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("attribute", help="which heads and MLPs wrote the next token's logit",
                              description="\n\n".join(__doc__.split("\n\n")[:2]),
                              parents=[prompt_flags(), chat_flags(), model_flags(), json_flags()])
    p.add_argument("--token", default=None, metavar="TOKEN", help="the token to attribute (default: the top-1)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    check_prompt(args.prompt)  # before the model loads
    from inspector.api.model import load

    result = load(args.model, device=args.device).attribute(args.prompt, chat=args.chat, system=args.system,
                                                            token=args.token, names="flags")
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    print(f"next token {result.piece!r} (id {result.token_id}): {result.decomposed()} {result.explained:.4f} "
          f"= sum of parts {result.total:.4f}")
    if result.softcap is not None:
        print(f"  after the final soft-cap, {result.cap_note()}")
    print(f"  {result.condition()}.")
    for name, value in result.ranked()[:SHOWN]:
        print(f"  {name:<16} {value:+.4f}")
    return 0


