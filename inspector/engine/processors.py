"""Logits processors: the ordered, named stages between a forward's logits and the distribution drawn from.

A processor is pure: `processor(ids, logits) -> logits` takes the token ids of the sequence so far (prompt
and generated, the newest last) and fp32 logits (..., V), and returns new logits of the same shape without
editing its input (as Hugging Face's `LogitsProcessor.__call__(input_ids, scores)`, minus the in-place
edits). A filter removes a token by setting its logit to -inf. Every processor has a `name`, shown as a
stage in the Sampling view.

The chain a draw runs (`sampling_chain`): the caller's own processors first (penalties, biases, grammar
masks: they act on raw logits, as `transformers` runs its processors before its warpers), then, when the
temperature is above 0, the four sampling stages in this order: `Temperature`, `TopK`, `TopP`, `MinP`
(Hugging Face's warper order; vLLM v1 names the same stages). Each filter looks at the distribution the
stages before it left (softmax of the current logits). `run_chain` returns the logits after every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

NEG_INF = float("-inf")


class LogitsProcessor(Protocol):
    name: str

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor: ...


def _masked(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """A copy of `logits` with -inf where `keep` is False."""
    return logits.masked_fill(~keep, NEG_INF)


@dataclass(frozen=True)
class Temperature:
    """logits / T (T > 0): T < 1 sharpens the distribution, T > 1 flattens it."""

    temperature: float
    name: str = "temperature"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return logits.float() / self.temperature


@dataclass(frozen=True)
class TopK:
    """Keep the k highest logits (k = 0 or k >= vocab: keep all). Ties at the k-th value are kept."""

    k: int
    name: str = "top-k"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.k <= 0 or self.k >= logits.shape[-1]:
            return logits
        kth = torch.topk(logits, self.k).values[..., -1:]
        return _masked(logits, logits >= kth)


@dataclass(frozen=True)
class TopP:
    """Nucleus sampling (Holtzman et al. 2019): keep the smallest set of most likely tokens whose
    probability sums to >= p; the most likely token is always kept."""

    p: float
    name: str = "top-p"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.p >= 1.0:
            return logits
        probs = torch.softmax(logits, dim=-1)
        sorted_probs, order = torch.sort(probs, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # probability of strictly better tokens
        keep_sorted = (mass_before < self.p) & (sorted_probs > 0)
        keep_sorted[..., 0] = True
        return _masked(logits, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


@dataclass(frozen=True)
class MinP:
    """Keep tokens whose probability is >= min_p x the top token's (Nguyen et al. 2024)."""

    min_p: float
    name: str = "min-p"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.min_p <= 0.0:
            return logits
        probs = torch.softmax(logits, dim=-1)
        return _masked(logits, probs >= self.min_p * probs.max(dim=-1, keepdim=True).values)


SAMPLING_STAGES = ("temperature", "top-k", "top-p", "min-p")


def sampling_chain(temperature: float, top_k: int, top_p: float, min_p: float,
                   extra: Sequence[LogitsProcessor] = ()) -> list[LogitsProcessor]:
    """The caller's processors, then the four sampling stages when temperature > 0 (none when greedy)."""
    chain = list(extra)
    if temperature > 0.0:
        chain += [Temperature(temperature), TopK(top_k), TopP(top_p), MinP(min_p)]
    return chain


def run_chain(chain: Sequence[LogitsProcessor], ids: Sequence[int], logits: torch.Tensor
              ) -> list[tuple[str, torch.Tensor]]:
    """[(stage name, logits after it)] for each processor in order; the input is never modified."""
    out = []
    x = logits.float()
    for proc in chain:
        x = proc(ids, x)
        if x.shape != logits.shape:
            raise ValueError(f"logits processor {proc.name!r} returned shape {tuple(x.shape)}, "
                             f"expected {tuple(logits.shape)}")
        out.append((proc.name, x))
    return out
