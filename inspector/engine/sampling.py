"""Sampling as pure functions: logits in, a token and every intermediate distribution out.

Stages run in this order (as Hugging Face's logits warpers): temperature -> top-k -> top-p -> min-p,
each on the distribution the previous stage left. No function edits its input in place. Temperature 0
means greedy: argmax of the raw logits, the filters are not applied (their masks keep everything) and
the final distribution is one-hot. Each draw takes an explicit `torch.Generator`; `generator_for(seed,
position)` gives the one the session uses, so the same (seed, position) always draws the same token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inspector.engine.config import SamplingParams


@dataclass
class SampleResult:
    """The chosen token and the distribution at each stage; tensors are (V,) and never aliased to the input."""

    token: int
    probs_raw: torch.Tensor  # softmax(logits), fp32
    probs_temperature: torch.Tensor  # softmax(logits / T); probs_raw when greedy
    kept_top_k: torch.Tensor  # bool: survived top-k
    kept_top_p: torch.Tensor  # bool: survived top-k and then top-p
    kept_min_p: torch.Tensor  # bool: survived all filters (top-k, top-p, min-p)
    probs_final: torch.Tensor  # renormalised over the survivors; one-hot when greedy
    entropy_raw: float  # nats
    entropy_final: float  # nats
    survivors: int  # tokens with non-zero final probability


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T as a new fp32 tensor (T > 0)."""
    return logits.float() / temperature


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Mask of the k highest logits (all True when k is 0 or >= vocab). Ties at the k-th value are kept."""
    if k <= 0 or k >= logits.shape[-1]:
        return torch.ones_like(logits, dtype=torch.bool)
    kth = torch.topk(logits, k).values[..., -1:]
    return logits >= kth


def apply_top_p(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Mask of the smallest set of most likely tokens whose probability sums to >= p (the top one always)."""
    if p >= 1.0:
        return probs > 0
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # probability of strictly better tokens
    keep_sorted = (mass_before < p) & (sorted_probs > 0)
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def apply_min_p(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """Mask of tokens with probability >= min_p x the top probability."""
    if min_p <= 0.0:
        return probs > 0
    return probs >= min_p * probs.max(dim=-1, keepdim=True).values


def renormalize(probs: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Zero the removed tokens and rescale the rest to sum to 1."""
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def entropy(probs: torch.Tensor) -> float:
    """Shannon entropy in nats (0 log 0 = 0)."""
    p = probs[probs > 0]
    return float(-(p * p.log()).sum())


def generator_for(seed: int, position: int) -> torch.Generator:
    """The generator for drawing the token at `position` under `seed` (the same pair, the same draw)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + position) % (2**63))


def stages(logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, ...]:
    """The stages at temperature > 0 over fp32 logits (..., V), each row on its own: (softmax after
    temperature, kept by top-k, kept by top-p, kept by min-p, the final distribution drawn from)."""
    scaled = apply_temperature(logits, params.temperature)
    probs_t = torch.softmax(scaled, dim=-1)
    kept_k = apply_top_k(scaled, params.top_k)
    kept_p = apply_top_p(renormalize(probs_t, kept_k), params.top_p) & kept_k
    kept_min = apply_min_p(renormalize(probs_t, kept_p), params.min_p) & kept_p
    return probs_t, kept_k, kept_p, kept_min, renormalize(probs_t, kept_min)


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None,
           force_token: int | None = None) -> SampleResult:
    """Run the stages on (V,) logits and draw a token; `force_token` skips the draw (branching)."""
    logits = logits.detach().float().reshape(-1)  # (V,), a copy when the input was not fp32
    probs_raw = torch.softmax(logits, dim=-1)
    every = torch.ones_like(logits, dtype=torch.bool)
    if params.temperature == 0.0:
        token = int(torch.argmax(logits)) if force_token is None else force_token
        final = torch.zeros_like(probs_raw)
        final[token] = 1.0
        return SampleResult(token, probs_raw, probs_raw, every, every.clone(), every.clone(), final,
                            entropy(probs_raw), 0.0, 1)
    probs_t, kept_k, kept_p, kept_min, final = stages(logits, params)
    if force_token is None:
        token = int(torch.multinomial(final, 1, generator=generator))
    else:
        token = force_token
    return SampleResult(token, probs_raw, probs_t, kept_k, kept_p, kept_min, final,
                        entropy(probs_raw), entropy(final), int(kept_min.sum()))
