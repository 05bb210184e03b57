"""`inspector run`'s decoding flags: the settings they give, and the `--num-beams` run.

`settings_from(args)` turns the flags of `flags.decoding_flags()` into a validated `DecodingSettings`
(the schema file read, `ID=V` biases parsed); InputError (one line) on anything refused.
`run_beam(args, loaded, params)` runs beam search (`inspector.generation.beam`) and prints the best
hypothesis, or with `--json` one object: the plain run's model, prompt_ids, prompt_pieces, generated_ids,
text and finished, plus `beams`: num_beams, length_penalty, early_stopping, hypotheses (every finished
beam: generated_ids, text, logprob, score = logprob / length ** length_penalty, best first) and steps
(per step, the candidates: beam node id, parent id, token id, piece, cumulative logprob, status
running | finished | dropped).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.generation.settings import DecodingSettings, parse_logit_bias


def settings_from(args: argparse.Namespace) -> DecodingSettings:
    """The validated decoding settings of `inspector run`'s flags."""
    schema = ""
    if args.json_schema is not None:
        try:
            schema = Path(args.json_schema).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the JSON schema file {args.json_schema!r}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        if not schema.strip():
            raise InputError(f"the JSON schema file {args.json_schema!r} is empty: give a JSON Schema object")
    if args.regex is not None and not args.regex:
        raise InputError("--regex is empty: give a regular expression the output must match")
    if args.choice and not any(args.choice):
        raise InputError("the --choice list is empty: give at least one non-empty string")
    settings = DecodingSettings(
        repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty, no_repeat_ngram_size=args.no_repeat_ngram_size,
        logit_bias=parse_logit_bias(args.logit_bias), bad_words=tuple(args.bad_words),
        min_new_tokens=args.min_new_tokens, stop=tuple(args.stop), num_beams=args.num_beams,
        length_penalty=args.length_penalty, json_schema=schema, regex=args.regex or "",
        choices=tuple(args.choice))
    settings.validate()
    settings.check_beams()
    if settings.constraint is not None:  # refuse a bad schema / regex before any model loads
        from inspector.generation.constraints import check_grammar

        check_grammar(*settings.constraint)
    return settings


def check_beam_args(args: argparse.Namespace, params: SamplingParams, settings: DecodingSettings) -> None:
    """InputError for what beam search does not combine with."""
    if settings.num_beams == 1:
        if settings.length_penalty != 1.0:
            raise InputError("--length-penalty scores beam hypotheses: add --num-beams B (B >= 2)")
        return
    clashes = [flag for flag, on in (("--temperature > 0", params.temperature > 0), ("--speculative", args.speculative),
                                     ("--quant", args.quant), ("--kv-quant", args.kv_quant),
                                     ("--save-trace", args.save_trace), ("--no-cache", args.no_cache),
                                     ("--stop", settings.stop)) if on]
    if clashes:
        raise InputError(f"--num-beams runs greedy beam search over the loaded model: drop {', '.join(clashes)}")


def run_beam(args: argparse.Namespace, loaded: Any, settings: DecodingSettings) -> int:
    """`run --num-beams B`: beam search, then the best hypothesis (or the JSON object)."""
    import sys

    rec = beam_record(loaded, args.prompt, args.chat, args.system, settings, args.max_new_tokens)
    best = rec.hypotheses[0]
    if args.json:
        print(json.dumps(beam_dict(loaded, rec), ensure_ascii=False))
        return 0
    print(best.text)
    print(f"[beam search, {rec.num_beams} beams: best of {len(rec.hypotheses)} hypotheses, score {best.score:.3f} "
          f"(logprob {best.logprob:.3f}), {len(best.token_ids)} tokens, finished: {rec.finish}]", file=sys.stderr)
    return 0


def beam_record(loaded: Any, prompt: str | None, chat: bool, system: str | None, settings: DecodingSettings,
                max_new_tokens: int, ids: list[int] | None = None) -> Any:
    """The `BeamRecord` of `run --num-beams` (the Python API's `Model.beam_search` and the page's Beams view
    search the same way: `inspector.session.beams.search`); `ids`: token ids given instead of the prompt."""
    from inspector.session.beams import search

    ids = loaded.tokenizer.prompt_ids(prompt, chat, system) if ids is None else list(ids)
    return search(loaded, ids, settings, max_new_tokens)


def beam_dict(loaded: Any, rec: Any) -> dict[str, Any]:
    best = rec.hypotheses[0]
    return {
        "model": loaded.name,
        "prompt_ids": rec.prompt_ids,
        "prompt_pieces": loaded.tokenizer.pieces(rec.prompt_ids),
        "generated_ids": best.token_ids,
        "text": best.text,
        "finished": rec.finish,
        "beams": {
            "num_beams": rec.num_beams, "length_penalty": rec.length_penalty, "early_stopping": rec.early_stopping,
            "hypotheses": [{"generated_ids": h.token_ids, "text": h.text, "logprob": h.logprob, "score": h.score}
                           for h in rec.hypotheses],
            "steps": [[{"node": n.id, "parent": n.parent, "id": n.token, "piece": n.piece, "logprob": n.logprob,
                        "status": n.status} for n in nodes] for nodes in rec.steps],
        },
    }


def stage_effects(sample: Any) -> list[dict[str, Any]]:
    """A step's stages for `--json`: name, allowed, removed, moved, mass_removed, top tokens before and after."""
    return [{"name": st.name, "allowed": st.allowed, "removed": st.removed, "moved": st.moved,
             "mass_removed": st.mass_removed,
             "top_before": [{"id": t.id, "piece": t.piece, "prob": t.prob} for t in st.top_before],
             "top_after": [{"id": t.id, "piece": t.piece, "prob": t.prob} for t in st.top_after]}
            for st in sample.stage_stats]
