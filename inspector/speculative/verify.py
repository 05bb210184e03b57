"""The verifier: the acceptance rule as pure functions over probability tensors, the one verify forward of
the full model, and the cache rollback.

Rule (Leviathan et al. 2023; Chen et al. 2023), for a draft token x drawn from the drafter's q where the full
model gives p: keep x with probability min(1, p(x) / q(x)); at the first rejection draw the token from
norm(max(0, p - q)) and stop; when all k drafts are kept, draw a bonus token from the full model's
distribution after the last one. The output then has exactly the full model's distribution. A drafter with
no distribution (prompt lookup) has q one-hot on x: keep with probability p(x), else draw from p with x
removed. Temperature 0 makes p one-hot on the argmax, so the rule keeps a draft exactly when it equals the
argmax and the correction is the argmax: plain greedy decoding, token for token.

p is the distribution `inspector.engine.sampling.sample` draws from (temperature, top-k, top-p, min-p, in
that order); the random draws of the token at position t use `generator_for(seed, t)`, so a run is
reproducible. Nothing here edits its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.processors import LogitsProcessor
from inspector.engine.sampling import final_probs, generator_for
from inspector.generation.levers import Levers
from inspector.generation.loop import NO_LEVERS, forward


def target_probs(logits: torch.Tensor, params: SamplingParams, contexts: Sequence[Sequence[int]] | None = None,
                 processors: Sequence[LogitsProcessor] = ()) -> torch.Tensor:
    """The distribution `sample` draws from, for each row of logits (..., V) -> (..., V) fp32; one-hot on the
    argmax when greedy (`inspector.engine.sampling.final_probs`, as `sample`). With `processors`, row i is
    processed after the ids `contexts[i]` (the context plus the drafts before it)."""
    if not processors:
        return final_probs(logits, params)
    return torch.stack([final_probs(row, params, ctx, processors) for row, ctx in zip(logits, contexts)])


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a (V,) distribution; the argmax when it is one-hot (no random number used)."""
    if float(probs.max()) >= 1.0:
        return int(probs.argmax())
    return int(torch.multinomial(probs, 1, generator=generator))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over (V,): where a rejected draft's mass goes. Falls back to p when p <= q
    everywhere (only possible through rounding, since a rejection needs p(x) < q(x) somewhere)."""
    diff = (p - q).clamp_min(0.0)
    total = diff.sum()
    return diff / total if float(total) > 0 else p


def one_hot(token: int, like: torch.Tensor) -> torch.Tensor:
    """The distribution of a drafter without one: all mass on the drafted token."""
    return torch.zeros_like(like).index_fill_(-1, torch.tensor([token]), 1.0)


@dataclass
class Verdict:
    accepted: int  # drafts kept, a prefix
    token: int  # the corrected token (accepted < k) or the bonus token (accepted == k)
    bonus: bool


def accept_token(x: int, p: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator | None
                 ) -> tuple[bool, int | None]:
    """One draft x against p (V,) and the drafter's q (V,) (None: one-hot on x). Returns (kept, None) or
    (False, the token drawn from the residual)."""
    qx = 1.0 if q is None else float(q[x])
    px = float(p[x])
    ratio = 1.0 if qx <= 0.0 else px / qx  # q(x) = 0 cannot happen for a token drawn from q
    if ratio >= 1.0:
        return True, None
    u = float(torch.rand((), generator=generator))
    if u < ratio:
        return True, None
    return False, draw(residual(p, one_hot(x, p) if q is None else q), generator)


def accept_drafts(drafts: Sequence[int], p: torch.Tensor, q: torch.Tensor | None, params: SamplingParams,
                  first_position: int) -> Verdict:
    """The whole rule over one round: drafts d_1..d_k, p (k+1, V) the full model's distributions for the
    positions of d_1..d_k and the one after, q (k, V) the drafter's (None: one-hot). The token at
    position first_position + i is decided with generator_for(seed, first_position + i)."""
    for i, x in enumerate(drafts):
        gen = None if params.temperature == 0.0 else generator_for(params.seed, first_position + i)
        kept, token = accept_token(x, p[i], None if q is None else q[i], gen)
        if not kept:
            return Verdict(i, token, bonus=False)
    k = len(drafts)
    gen = None if params.temperature == 0.0 else generator_for(params.seed, first_position + k)
    return Verdict(k, draw(p[k], gen), bonus=True)


def verify_forward(model: Transformer, cache: KVCache, ids: Sequence[int], levers: Levers = NO_LEVERS) -> torch.Tensor:
    """One forward of the full model over the last token and the k drafts (k+1 positions after the cache's
    committed ones), committed to the cache: the generation loop's forward with more positions. The logits
    (k+1, V) fp32, row i predicting the token after ids[i]."""
    return forward(model, cache, [ids], levers, all_positions=True)[0]


def rollback(cache: KVCache, length: int) -> None:
    """Forget the positions past `length` (the rejected drafts'): the cache as plain decoding would hold it."""
    cache.truncate(min(length, cache.lengths[0]))
