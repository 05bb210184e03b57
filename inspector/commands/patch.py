"""`inspector patch --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--point resid_pre|attn_out|mlp_out]`:
activation patching over every layer x position (`inspector.analysis.patching`).

Each cell is the normalized logit difference recovered, (LD_patched - LD_corrupt) / (LD_clean -
LD_corrupt), LD = logit(answer) - logit(wrong) at the last position. Prompts are tokenized without a chat
template and must have the same token length. TOKEN is a text that is exactly one token (" Paris") or
an id as #ID. `--json` prints {"point", "layers", "positions", "matrix": [[...] per layer],
"clean_logit_diff", "corrupt_logit_diff", "seconds", "answer_id", "wrong_id", "pieces", "corrupt_pieces"};
without it, the cells that recover most are listed. The command is `inspector.load(...).patch(...)`
(`inspector.api.analyses.patch`).
"""

from __future__ import annotations

import argparse
import json

from inspector.api.analyses import POINTS, check_patch_texts
from inspector.commands.flags import json_flags, model_flags

SHOWN = 10


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("patch", help="activation patching: which layer and position restore the clean answer",
                              description=__doc__.split("\n\n")[0], parents=[model_flags(), json_flags()])
    p.add_argument("--clean", required=True, metavar="TEXT", help="the prompt where the model answers right")
    p.add_argument("--corrupt", required=True, metavar="TEXT", help="the same prompt with something changed")
    p.add_argument("--answer", required=True, metavar="TOKEN", help="the clean answer token (text or #ID)")
    p.add_argument("--wrong", required=True, metavar="TOKEN", help="the corrupted prompt's answer token (text or #ID)")
    p.add_argument("--point", choices=POINTS, default="resid_pre", help="what to patch (default resid_pre)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    check_patch_texts(args.clean, args.corrupt)  # before the model loads
    from inspector.api.model import load

    result = load(args.model, device=args.device).patch(args.clean, args.corrupt, args.answer, args.wrong,
                                                        point=args.point, names="flags")
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    print(f"{args.point} patching, {len(result.layers)} layers x {len(result.positions)} positions in "
          f"{result.seconds:.1f} s; LD clean {result.clean_logit_diff:.3f}, corrupt {result.corrupt_logit_diff:.3f}")
    cells = sorted(((v, L, p) for L, row in zip(result.layers, result.matrix) for p, v in enumerate(row)), reverse=True)
    for v, L, p in cells[:SHOWN]:
        print(f"  layer {L:>2}  position {p:>3} {result.pieces[p]!r:>14}: {v:+.3f}")
    return 0


