"""`inspector run`'s decoding flags: the settings they give, and the `--num-beams` run.

The flags of `flags.decoding_flags()` become a validated `DecodingSettings` through the run's `RunRequest`
(`inspector.generation.request`: the schema file read, `ID=V` biases parsed; InputError on anything refused).
`run_beam(args, model, request)` runs the request's beam search through the Python API
(`Model.beam_search(request=...)`: the one request, its refusals naming the flags) and prints the best
hypothesis, or with `--json` one object: the plain run's model, prompt_ids, prompt_pieces, generated_ids, text
and finished, plus `beams`: num_beams, length_penalty, early_stopping, hypotheses (every finished beam:
generated_ids, text, logprob, score = logprob / length ** length_penalty, best first) and steps (per step, the
candidates: beam node id, parent id, token id, piece, cumulative logprob, status running | finished |
dropped), and `request`, the run's description (`RunRequest.to_json()`) as in a plain run's JSON.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inspector.commands.flags import json_text
from inspector.generation.request import RunRequest


def run_beam(args: argparse.Namespace, model: Any, request: RunRequest) -> int:
    """`run --num-beams B`: `model.beam_search` of the request, then the best hypothesis (or the JSON object)."""
    rec = model.beam_search(request=request, names="flags")
    best = rec.hypotheses[0]
    if args.json:
        print(json_text(beam_dict(model.loaded, rec)))
        return 0
    print(best.text)
    print(f"[beam search, {rec.num_beams} beams: best of {len(rec.hypotheses)} hypotheses, score {best.score:.3f} "
          f"(logprob {best.logprob:.3f}), {len(best.token_ids)} tokens, finished: {rec.finish}]", file=sys.stderr)
    return 0


def beam_dict(loaded: Any, rec: Any) -> dict[str, Any]:
    """The `--json` object of a beam search (`BeamRecord`), with the run's "request" when the record carries one."""
    best = rec.hypotheses[0]
    out = {
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
    if rec.request is not None:
        out["request"] = rec.request.to_json()
    return out


def stage_effects(sample: Any) -> list[dict[str, Any]]:
    """A step's stages for `--json`: name, allowed, removed, moved, mass_removed, top tokens before and after."""
    return [{"name": st.name, "allowed": st.allowed, "removed": st.removed, "moved": st.moved,
             "mass_removed": st.mass_removed,
             "top_before": [{"id": t.id, "piece": t.piece, "prob": t.prob} for t in st.top_before],
             "top_after": [{"id": t.id, "piece": t.piece, "prob": t.prob} for t in st.top_after]}
            for st in sample.stage_stats]
