"""Sampling as pure functions: logits in, a token and every intermediate distribution out.

A draw runs the chain of logits processors of `inspector.engine.processors`: the caller's own processors
(none by default), then temperature -> top-k -> top-p -> min-p, each on the distribution the previous
stage left, and draws from the softmax of the last stage's logits. No function edits its input in place.
Temperature 0 means greedy: argmax of the logits after the caller's processors, the four sampling stages
are not run (their masks keep everything) and the final distribution is one-hot. Each draw takes an
explicit `torch.Generator`; `generator_for(seed, position)` gives the one the session uses, so the same
(seed, position) always draws the same token. A draw works out only its token; the `SampleResult`
computes each distribution from the draw's logits when first read (see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.processors import LogitsProcessor, run_chain, sampling_chain


class SampleResult:
    """The chosen token and the distribution at each stage; tensors are (V,) and never aliased to the input.

    Only the token is worked out by the draw itself; every distribution is computed from the draw's logits
    (and each stage's, kept by the draw) when first read, then kept: a greedy step that nobody inspects
    costs an argmax. The logits handed to `sample` must stay unmodified until then (no caller here
    modifies logits; a stage's output is never edited in place either)."""

    def __init__(self, token: int, logits: torch.Tensor, staged: list[tuple[str, torch.Tensor]], greedy: bool,
                 final: torch.Tensor | None = None) -> None:
        self.token = token
        self._logits, self._staged, self._greedy = logits, staged, greedy  # logits: (V,) fp32
        if final is not None:
            self.probs_final = final

    @property
    def _last(self) -> torch.Tensor:
        return self._staged[-1][1] if self._staged else self._logits

    @cached_property
    def probs_raw(self) -> torch.Tensor:
        """softmax(logits), fp32."""
        return torch.softmax(self._logits, dim=-1)

    @cached_property
    def probs_temperature(self) -> torch.Tensor:
        """softmax(logits / T); probs_raw when greedy."""
        return self.probs_raw if self._greedy else dict(self.stages)["temperature"]

    @cached_property
    def kept_top_k(self) -> torch.Tensor:
        """bool: survived top-k (when greedy: every token the caller's processors left finite)."""
        return self._kept("top-k")

    @cached_property
    def kept_top_p(self) -> torch.Tensor:
        """bool: survived top-k and then top-p."""
        return self._kept("top-p")

    @cached_property
    def kept_min_p(self) -> torch.Tensor:
        """bool: survived all filters (top-k, top-p, min-p)."""
        return self._kept("min-p")

    def _kept(self, stage: str) -> torch.Tensor:
        return torch.isfinite(self._last if self._greedy else dict(self._staged)[stage])

    @cached_property
    def probs_final(self) -> torch.Tensor:
        """Renormalised over the survivors; one-hot on the token when greedy."""
        if self._greedy:
            final = torch.zeros_like(self._logits)
            final[self.token] = 1.0
            return final
        return torch.softmax(self._last, dim=-1)

    @cached_property
    def entropy_raw(self) -> float:
        """nats, of probs_raw."""
        return entropy(self.probs_raw)

    @cached_property
    def entropy_final(self) -> float:
        """nats, of probs_final (0 when greedy)."""
        return 0.0 if self._greedy else entropy(self.probs_final)

    @cached_property
    def survivors(self) -> int:
        """Tokens with non-zero final probability (1 when greedy)."""
        return 1 if self._greedy else int(self.kept_min_p.sum())

    @cached_property
    def stages(self) -> list[tuple[str, torch.Tensor]]:
        """(name, softmax after it) per processor of the chain, in order."""
        return [(name, torch.softmax(x, dim=-1)) for name, x in self._staged]

    @property
    def stage_names(self) -> list[str]:
        """The chain's processors, in order (without computing any distribution)."""
        return [name for name, _ in self._staged]

    @property
    def stage_logits(self) -> list[torch.Tensor]:
        """The logits after each stage, fp32 (V,)."""
        return [x for _, x in self._staged]


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
    staged = run_chain(chain_for(params, processors), ids, logits)
    last = staged[-1][1] if staged else logits
    if params.temperature == 0.0:
        token = int(torch.argmax(last)) if force_token is None else force_token
        return SampleResult(token, logits, staged, greedy=True)
    final = torch.softmax(last, dim=-1)
    if force_token is None:
        token = int(torch.multinomial(final, 1, generator=generator))
    else:
        token = force_token
    return SampleResult(token, logits, staged, greedy=False, final=final)
