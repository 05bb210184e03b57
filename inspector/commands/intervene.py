"""The levers `inspector run` builds from its intervention flags (`flags.intervention_flags`), and the
token arguments of `inspector patch` / `attribute`.

`spec_from(args, cfg)` reads them as a `LeverSpec` (`inspector.generation.lever_spec`, what a trace file
keeps), every layer and head checked against the model (InputError, one line naming the allowed range);
`levers_from(args, loaded)` returns its `Levers(interventions=...)` in flag order: --ablate-head L.H,
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


def spec_from(args: argparse.Namespace, cfg: Any) -> Any:
    """The `LeverSpec` of the intervention flags, every layer and head checked against `cfg`."""
    from inspector.generation import interventions as ivs  # torch: imported once a model is loaded
    from inspector.generation.lever_spec import LeverSpec

    if args.steer is not None or args.steer_towards or args.steer_away:
        if args.steer is None:
            raise InputError("--steer-towards / --steer-away need --steer L (the layer to steer at)")
        if not (args.steer_towards or "").strip() or not (args.steer_away or "").strip():
            raise InputError("--steer needs two non-empty prompts: --steer-towards TEXT and --steer-away TEXT")
    spec = LeverSpec(
        ablate_head=tuple(ivs.parse_head(h, cfg) for h in args.ablate_head),
        ablate=getattr(args, "ablate", "zero"),
        ablate_mlp=tuple(ivs.check_layer(cfg, layer) for layer in args.ablate_mlp),
        scale_head=tuple(ivs.parse_scaled_head(h, cfg) for h in args.scale_head),
        steer=None if args.steer is None else ivs.check_layer(cfg, args.steer),
        steer_towards=args.steer_towards if args.steer is not None else None,
        steer_away=args.steer_away if args.steer is not None else None,
        steer_alpha=float(args.steer_alpha))
    spec.check()
    return spec


def levers_from(args: argparse.Namespace, loaded: Any, prompt_ids: list[int] = ()) -> Any:
    """The levers of the intervention flags over `loaded` (`prompt_ids`: the prompt a mean-ablation averages)."""
    from inspector.generation.levers import Levers

    spec = spec_from(args, loaded.config)
    return Levers(interventions=spec.interventions(loaded.model, loaded.tokenizer.encode, prompt_ids))


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
