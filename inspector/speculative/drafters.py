"""Drafters: cheap proposers of the next k tokens, behind one interface the verifier never looks past.

`Drafter` (a Protocol): `name`; `draft(context, k, params) -> Draft` proposes up to k tokens to follow
`context` (the prompt and every token generated so far, the newest one included); `rollback(length)` says
that only context[:length] is final after a verify (a drafter with its own KV cache truncates it);
`reset()` forgets everything (a new prompt). `Draft.q` holds the drafter's distribution (n, V) of each
proposed token, or None when the drafter has none (q is then one-hot on the proposal). A drafter may
propose fewer than k tokens, or none (the round is then a plain decode step).

- `PromptLookupDrafter` ("ngram"): the last n tokens (n from `max_ngram` 3 down to `min_ngram` 2) are looked
  up earlier in the context; the tokens that followed the match are the draft (what `transformers` calls
  prompt lookup decoding). No model, no distribution. One-token matches are off by default: on free text
  they draft often and are mostly rejected, and a verify over k+1 positions costs more than a decode step.
- `EarlyExitDrafter` ("early-exit:L"): the first L blocks of the same model, then its final norm and LM
  head (the logit lens at layer L used as a model), with its own KV cache for those L layers. It drafts
  token by token, sampling with the same settings as the full model (argmax when greedy) and the
  generator `generator_for(seed, position + DRAFT_STREAM)`, apart from the verifier's draws.
`make_drafter(spec, model)` builds one from its CLI/UI name; an unknown name or an L out of range is an
InputError. A third drafter (a quantized copy of the model, say) only has to implement the Protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.model import Transformer
from inspector.engine.sampling import generator_for
from inspector.engine.steps import new_cache
from inspector.errors import InputError
from inspector.generation.loop import forward
from inspector.validate import whole
from inspector.speculative.verify import draw, target_probs

DRAFT_STREAM = 2**40  # offset of the drafter's generator positions: never the verifier's


@dataclass
class Draft:
    ids: list[int]
    q: torch.Tensor | None  # (len(ids), V) fp32, or None: one-hot on each proposed token
    shown_q: list[float]  # what to show as q: the drafter's raw probability of each token when greedy


class Drafter(Protocol):
    name: str

    def draft(self, context: Sequence[int], k: int, params: SamplingParams) -> Draft: ...

    def rollback(self, length: int) -> None: ...

    def reset(self) -> None: ...


def lookup(context: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to k tokens that followed an earlier occurrence of the context's last n tokens (longest n first).
    Among the matches of one n, the most recent one that is followed by k tokens, else the one followed by
    the most."""
    ctx = list(context)
    L = len(ctx)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        tail = ctx[L - n:]
        best: list[int] = []
        for s in range(L - n - 1, -1, -1):  # s + n < L: at least one token follows the match
            if ctx[s:s + n] == tail:
                follow = ctx[s + n:s + n + k]
                if len(follow) > len(best):
                    best = follow
                if len(best) == k:
                    break
        if best:
            return best
    return []


class PromptLookupDrafter:
    """Drafts by n-gram match against the prompt and the output so far (no model)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2) -> None:
        self.name = "ngram"
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def draft(self, context: Sequence[int], k: int, params: SamplingParams) -> Draft:
        ids = lookup(context, k, self.max_ngram, self.min_ngram)
        return Draft(ids, None, [1.0] * len(ids))

    def rollback(self, length: int) -> None:
        pass  # no state: the context is read afresh each round

    def reset(self) -> None:
        pass


def early_exit_layers(value: object, n: int) -> int:
    """The early-exit drafter's layer count from what a user gave: 1 .. n - 1 (InputError otherwise)."""
    return whole(value, "early-exit layer", 1, n - 1, note=f"(the model has {n} layers)")


class EarlyExitDrafter:
    """The first `layers` blocks + final norm + LM head of `model`, with its own KV cache."""

    def __init__(self, model: Transformer, layers: int | str) -> None:
        self.model, self.layers = model, early_exit_layers(layers, model.config.num_hidden_layers)
        self.name = f"early-exit:{layers}"
        self.cache = new_cache(model)  # only the first `layers` layers' buffers are ever allocated

    def _next_logits(self, ids: Sequence[int]) -> torch.Tensor:
        """Feed ids after the drafter's cache (the first `layers` blocks); the logits (V,) fp32 after the last one."""
        return forward(self.model, self.cache, [ids], n_layers=self.layers)[0]

    def draft(self, context: Sequence[int], k: int, params: SamplingParams) -> Draft:
        # Catch up first: the tokens the drafter has not seen (the whole prompt on the first round; the
        # last kept draft and the verifier's token after that) go in one forward.
        fed = list(context[self.cache.lengths[0]:])
        ids: list[int] = []
        qs: list[torch.Tensor] = []
        shown: list[float] = []
        for i in range(k):
            logits = self._next_logits(fed)
            q = target_probs(logits, params)
            gen = None if params.temperature == 0.0 else generator_for(params.seed, len(context) + i + DRAFT_STREAM)
            token = draw(q, gen)
            ids.append(token)
            qs.append(q)
            shown.append(float(torch.softmax(logits, -1)[token]) if params.temperature == 0.0 else float(q[token]))
            fed = [token]  # the last draft is not fed: the verifier decides whether it stays
        return Draft(ids, torch.stack(qs) if qs else None, shown)

    def rollback(self, length: int) -> None:
        self.cache.truncate(min(length, self.cache.lengths[0]))

    def reset(self) -> None:
        self.cache = new_cache(self.model)


DRAFTER_NAMES = ("ngram", "early-exit:L")


def make_drafter(spec: str, model: Transformer) -> Drafter:
    """`ngram` or `early-exit:L` -> a drafter over `model`; InputError naming what is wrong otherwise."""
    spec = (spec or "").strip()
    if spec == "ngram":
        return PromptLookupDrafter()
    if spec.startswith("early-exit:"):
        return EarlyExitDrafter(model, spec.split(":", 1)[1])
    raise InputError(f"unknown drafter {spec[:40]!r}: use ngram or early-exit:L (L = layers to draft with)")
