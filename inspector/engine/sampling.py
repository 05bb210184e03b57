"""Sampling as pure functions: logits in, a token and every intermediate distribution out.

A draw runs the chain of logits processors of `inspector.engine.processors`: the caller's own processors
(none by default), then temperature -> top-k -> top-p -> min-p, each on the distribution the previous
stage left, and draws from the softmax of the last stage's logits. No function edits its input in place.
Temperature 0 means greedy: argmax of the logits after the caller's processors, the four sampling stages
are not run (their masks keep everything) and the final distribution is one-hot. Each draw takes an
explicit `torch.Generator`; `generator_for(seed, position)` gives the one the session uses, so the same
(seed, position) always draws the same token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.processors import LogitsProcessor, run_chain, sampling_chain


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
    stages: list[tuple[str, torch.Tensor]] = field(default_factory=list)  # (name, softmax after it) per processor
    stage_logits: list[torch.Tensor] = field(default_factory=list)  # the logits after each stage, fp32 (V,)


def entropy(probs: torch.Tensor) -> float:
    """Shannon entropy in nats (0 log 0 = 0)."""
    p = probs[probs > 0]
    return float(-(p * p.log()).sum())


def generator_for(seed: int, position: int) -> torch.Generator:
    """The generator for drawing the token at `position` under `seed` (the same pair, the same draw)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + position) % (2**63))


def chain_for(params: SamplingParams, extra: Sequence[LogitsProcessor] = ()) -> list[LogitsProcessor]:
    """The processors a draw with `params` runs: `extra` first, then the sampling stages (temperature > 0)."""
    return sampling_chain(params.temperature, params.top_k, params.top_p, params.min_p, extra)


def final_probs(logits: torch.Tensor, params: SamplingParams, ids: Sequence[int] = (),
                extra: Sequence[LogitsProcessor] = ()) -> torch.Tensor:
    """The distribution `sample` draws from, for each row of fp32 logits (..., V) -> (..., V): one-hot on the
    argmax (after `extra`) when greedy. Every row is processed with the same `ids`."""
    logits = logits.float()
    staged = run_chain(chain_for(params, extra), ids, logits)
    last = staged[-1][1] if staged else logits
    if params.temperature == 0.0:
        return torch.zeros_like(last).scatter_(-1, last.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(last, dim=-1)


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None,
           force_token: int | None = None, *, ids: Sequence[int] = (),
           processors: Sequence[LogitsProcessor] = ()) -> SampleResult:
    """Run the chain on (V,) logits and draw a token; `force_token` skips the draw (branching). `ids` are the
    sequence's tokens so far (what `processors` read)."""
    logits = logits.detach().float().reshape(-1)  # (V,), a copy when the input was not fp32
    probs_raw = torch.softmax(logits, dim=-1)
    staged = run_chain(chain_for(params, processors), ids, logits)
    stage_probs = [(name, torch.softmax(x, dim=-1)) for name, x in staged]
    last = staged[-1][1] if staged else logits
    if params.temperature == 0.0:
        token = int(torch.argmax(last)) if force_token is None else force_token
        final = torch.zeros_like(probs_raw)
        final[token] = 1.0
        allowed = torch.isfinite(last)
        return SampleResult(token, probs_raw, probs_raw, allowed, allowed.clone(), allowed.clone(), final,
                            entropy(probs_raw), 0.0, 1, stage_probs, [x for _, x in staged])
    after = dict(staged)
    final = torch.softmax(last, dim=-1)
    if force_token is None:
        token = int(torch.multinomial(final, 1, generator=generator))
    else:
        token = force_token
    kept_min = torch.isfinite(after["min-p"])
    return SampleResult(token, probs_raw, dict(stage_probs)["temperature"], torch.isfinite(after["top-k"]),
                        torch.isfinite(after["top-p"]), kept_min, final, entropy(probs_raw), entropy(final),
                        int(kept_min.sum()), stage_probs, [x for _, x in staged])
