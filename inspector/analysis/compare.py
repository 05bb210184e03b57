"""Two branches of one prompt side by side: texts, next-token distributions and residual streams per step.

Each branch is (label, levers, generated ids). Both are replayed in sessions of their own (the page's
session is left as it is): prompt under the branch's levers, then each of its tokens forced in turn, so
every step's logits and last-position residuals are those its run had. Per step: each branch's top
`TOP` tokens with their probabilities (softmax of the raw logits), and per layer the L2 norm of the
difference of the two residual streams (after the layer, at the newest position). Steps go as far as the
shorter branch; after the first diverging token the two contexts differ and so do the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.analysis.findings import Comparison
from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.generation.levers import Levers
from inspector.models.loader import LoadedModel
from inspector.session.intervene import replay
from inspector.session.session import Session

TOP = 5
Branch = tuple[str, Levers | None, Sequence[int]]  # (label, its levers (None: none), its generated ids)


def _run(loaded: LoadedModel, prompt_ids: list[int], params: SamplingParams, levers: Levers | None,
         ids: Sequence[int], max_new_tokens: int) -> Session:
    s = Session(loaded, lens=False, levers=Levers() if levers is None else levers)
    s.prefill_ids(prompt_ids, params, max_new_tokens=max_new_tokens)
    replay(s, levers, list(ids))
    return s


@torch.inference_mode()
def compare(loaded: LoadedModel, prompt_ids: Sequence[int], params: SamplingParams, a: Branch, b: Branch,
            max_new_tokens: int = 64) -> Comparison:
    """The comparison of branches `a` and `b` of one prompt (see the module docstring)."""
    if not a[2] or not b[2]:
        raise InputError("both branches need at least one generated token")
    runs = [_run(loaded, list(prompt_ids), params, lv, ids, max_new_tokens) for _, lv, ids in (a, b)]
    n = min(len(a[2]), len(b[2]))
    tops: tuple[list, list] = ([], [])
    for side, s in enumerate(runs):
        for k in range(n):
            c = s.records[k].sample.candidates[:TOP]
            tops[side].append([(x.piece, x.prob_raw) for x in c])
    resid = []
    for k in range(n):
        ra, rb = runs[0].trace.forwards[k].lens_inputs, runs[1].trace.forwards[k].lens_inputs  # (layers, D)
        resid.append(torch.linalg.vector_norm((ra - rb).float(), dim=-1).tolist())
    first = next((k for k, (x, y) in enumerate(zip(a[2], b[2])) if x != y), None)
    piece = loaded.tokenizer.piece
    return Comparison((a[0], b[0]), ([piece(t) for t in a[2]], [piece(t) for t in b[2]]), first, tops, resid)
