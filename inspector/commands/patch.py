"""`inspector patch --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN [--point resid_pre|attn_out|mlp_out]`:
activation patching over every layer x position (`inspector.analysis.patching`).

Each cell is the normalized logit difference recovered, (LD_patched - LD_corrupt) / (LD_clean -
LD_corrupt), LD = logit(answer) - logit(wrong) at the last position. Prompts are tokenized without a chat
template and must have the same token length. TOKEN is a text that is exactly one token (" Paris") or
an id as #ID. `--json` prints {"point", "layers", "positions", "matrix": [[...] per layer],
"clean_logit_diff", "corrupt_logit_diff", "seconds", "answer_id", "wrong_id", "pieces", "corrupt_pieces"};
without it, the cells that recover most are listed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from inspector.commands.flags import json_flags, model_flags
from inspector.errors import InputError

POINTS = ("resid_pre", "attn_out", "mlp_out")
SHOWN = 10


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("patch", help="activation patching: which layer and position restore the clean answer",
                              description=__doc__.split("\n\n")[0], parents=[model_flags(), json_flags()])
    p.add_argument("--clean", required=True, metavar="TEXT", help="the prompt where the model answers right")
    p.add_argument("--corrupt", required=True, metavar="TEXT", help="the same prompt with something changed")
    p.add_argument("--answer", required=True, metavar="TOKEN", help="the clean answer token (text or #ID)")
    p.add_argument("--wrong", required=True, metavar="TOKEN", help="the corrupted prompt's answer token (text or #ID)")
    p.add_argument("--point", choices=POINTS, default="resid_pre", help="what to patch (default resid_pre)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_prompts(args.clean, args.corrupt)  # before the model loads
    from inspector.models.loader import load_model

    loaded = load_model(args.model)
    result = patching(loaded, args.clean, args.corrupt, args.answer, args.wrong, args.point)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    print(f"{args.point} patching, {len(result.layers)} layers x {len(result.positions)} positions in "
          f"{result.seconds:.1f} s; LD clean {result.clean_logit_diff:.3f}, corrupt {result.corrupt_logit_diff:.3f}")
    cells = sorted(((v, L, p) for L, row in zip(result.layers, result.matrix) for p, v in enumerate(row)), reverse=True)
    for v, L, p in cells[:SHOWN]:
        print(f"  layer {L:>2}  position {p:>3} {result.pieces[p]!r:>14}: {v:+.3f}")
    return 0


def patching(loaded: Any, clean: str | None, corrupt: str | None, answer: str, wrong: str, point: str = "resid_pre",
             ids: tuple[list[int], list[int]] | None = None) -> Any:
    """The `PatchSweep` this command prints (the Python API's too; `ids`: the clean and corrupted token ids
    given instead of the texts); answer and wrong as --answer / --wrong take them (one token's text or #ID)."""
    from inspector.analysis.patching import sweep
    from inspector.commands.intervene import token_id

    if ids is None:
        check_prompts(clean, corrupt)
    if point not in POINTS:
        raise InputError(f"--point must be one of {', '.join(POINTS)}, got {point!r}")
    tok = loaded.tokenizer
    clean_ids, corrupt_ids = (tok.encode(clean), tok.encode(corrupt)) if ids is None else map(list, ids)
    if len(clean_ids) != len(corrupt_ids):
        raise InputError(f"--clean is {len(clean_ids)} tokens and --corrupt {len(corrupt_ids)}: patching needs "
                         "prompts of the same token length")
    answer_id, wrong_id = token_id(answer, tok, "--answer"), token_id(wrong, tok, "--wrong")
    return sweep(loaded.model, clean_ids, corrupt_ids, answer_id, wrong_id, point,
                 pieces=(tok.pieces(clean_ids), tok.pieces(corrupt_ids)))


def check_prompts(clean: str, corrupt: str) -> None:
    if not clean.strip() or not corrupt.strip():
        raise InputError("--clean and --corrupt need text: both prompts are required")
