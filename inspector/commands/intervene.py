"""The levers `inspector run` builds from its intervention flags (`flags.intervention_flags`), and the
token arguments of `inspector patch` / `attribute`.

`levers_from(args, loaded)` checks every layer and head against the loaded model (InputError, one line
naming the allowed range) and returns `Levers(interventions=...)` in flag order: --ablate-head L.H,
--ablate-mlp L, --scale-head L.H=F, then the steering vector of --steer L (alpha x the mean residual of
--steer-towards minus that of --steer-away, both tokenized without a chat template).
`token_id(text, tokenizer, flag)`: a text that is exactly one token, or "#ID".
"""

from __future__ import annotations

import argparse
from typing import Any

from inspector.errors import InputError


def wants_interventions(args: argparse.Namespace) -> bool:
    return bool(args.ablate_head or args.ablate_mlp or args.scale_head or args.steer is not None
                or args.steer_towards or args.steer_away)


def levers_from(args: argparse.Namespace, loaded: Any) -> Any:
    from inspector.generation import interventions as ivs  # torch: imported once a model is loaded
    from inspector.generation.levers import Levers

    cfg, tok = loaded.config, loaded.tokenizer
    out: list = []
    for spec in args.ablate_head:
        L, h = ivs.parse_head(spec, cfg)
        out += ivs.head(cfg, L, h, "zero")
    for layer in args.ablate_mlp:
        out += ivs.component(cfg, "mlp_out", layer, "zero")
    for spec in args.scale_head:
        L, h, f = ivs.parse_scaled_head(spec, cfg)
        out += ivs.head(cfg, L, h, "scale", factor=f)
    if args.steer is not None or args.steer_towards or args.steer_away:
        if args.steer is None:
            raise InputError("--steer-towards / --steer-away need --steer L (the layer to steer at)")
        towards, away = (args.steer_towards or "").strip(), (args.steer_away or "").strip()
        if not towards or not away:
            raise InputError("--steer needs two non-empty prompts: --steer-towards TEXT and --steer-away TEXT")
        vec = ivs.steering_vector(loaded.model, tok.encode(towards), tok.encode(away), args.steer)
        out += ivs.steer(cfg, args.steer, vec, args.steer_alpha)
    return Levers(interventions=tuple(out))


def token_id(text: str, tokenizer: Any, flag: str) -> int:
    """The one token `text` encodes to, or the id written as "#ID"; InputError otherwise."""
    vocab = tokenizer.vocab_size if hasattr(tokenizer, "vocab_size") else None
    if text.startswith("#") and text[1:].isdigit():
        t = int(text[1:])
        if vocab is not None and not 0 <= t < vocab:
            raise InputError(f"{flag} {text}: token ids are 0 to {vocab - 1}")
        return t
    if not text:
        raise InputError(f"{flag} is empty: give one token's text (e.g. ' Paris') or its id as #ID")
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise InputError(f"{flag} {text!r} is {len(ids)} tokens {tokenizer.pieces(ids)}: give one token's text "
                         "(a word's token usually starts with a space) or its id as #ID")
    return ids[0]
