"""KV-cache policies: after every forward, which cached positions each layer (and KV head) keeps.

The loop (`inspector.generation.loop.apply_policy`) asks the policy after each forward, for every row the
forward wrote. The base protocol is `evict(layer, held) -> positions to evict | None`, `held` the absolute
positions the layer still attends to (ascending; the newest is the last token written). Three optional
capabilities, each a class attribute the loop reads:
- `per_head = True`: the loop calls `evict_heads(layer, row, held)` with `held` a list per KV head instead,
  and evicts per KV head (a budget per layer and KV head, as H2O and SnapKV count it).
- `observes = True`: before evicting, the loop calls `observe(layer, row, pattern, start)` with the
  attention the row's new queries used, `pattern` (kv_heads, n_rep, T, S) fp32: the T queries at positions
  start..start+T-1 (the n_rep query heads of each KV head) over keys 0..S-1, S = start + T.
- `rerotate = True` (the sliding-window family): the loop compacts the row instead of masking, so kept
  keys are re-rotated into the contiguous range 0..n-1 (StreamingLLM's convention,
  `inspector.engine.kv_cache.KVCache.compact`); otherwise evicted entries are masked and kept keys keep
  their original positions and rotary phase (H2O's convention).

Policies here, each keeping at most `budget` positions per layer (and KV head) after a forward (SnapKV
after its one eviction, at the prefill; the decode steps after it add to the cache):
- `KeepAll` ("full"): the cache only grows.
- `SlidingWindow(window, sinks=0, rerotate=False)` ("window", or "sinks" with sinks): the first `sinks`
  positions (attention sinks) and the newest `window`. Layer- and head-independent.
- `HeavyHitters(budget, recent)` ("h2o", Zhang et al. 2023): per layer and KV head, the `recent` newest
  positions plus the `budget - recent` older ones with the largest accumulated attention: every query's
  weight on a key, summed over all forwards so far and over the KV head's query heads.
- `SnapKV(budget, window, kernel)` ("snapkv", Li et al. 2024): once, after a forward of more than one
  token (a prefill), per layer and KV head: the last `window` prompt positions (the observation window)
  vote with their attention on every earlier position; votes are max-pooled over `kernel` neighbours,
  and the top `budget - window` earlier positions are kept with the window. Decode steps evict nothing.
Stateful policies (H2O's scores, SnapKV's votes) keep their state per (layer, row) and start afresh when
a row's forward starts at position 0: use one instance per generation. `make_policy` builds one from
the names the CLI and the UI take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F

from inspector.errors import InputError

POLICIES = ("full", "window", "sinks", "h2o", "snapkv")
SNAP_WINDOW = 32  # SnapKV's observation window (the paper's default), at most half the budget
SNAP_KERNEL = 7  # SnapKV's pooling kernel


class CachePolicy(Protocol):
    name: str

    def evict(self, layer: int, held: torch.Tensor) -> torch.Tensor | None: ...


@dataclass(frozen=True)
class KeepAll:
    """Keep every cached position (what a KV cache does without a policy)."""

    name: str = "full"

    def evict(self, layer: int, held: torch.Tensor) -> torch.Tensor | None:
        return None


@dataclass(frozen=True)
class SlidingWindow:
    """Keep the first `sinks` positions and the newest `window`; evict the rest after each forward.
    `rerotate`: compact the cache and re-rotate the kept keys (StreamingLLM) instead of masking (H2O)."""

    window: int
    sinks: int = 0
    name: str = "window"
    rerotate: bool = False

    def __post_init__(self) -> None:
        if self.window < 1 or self.sinks < 0:
            raise InputError(f"a sliding window needs window >= 1 and sinks >= 0, got {self.window}, {self.sinks}")

    def evict(self, layer: int, held: torch.Tensor) -> torch.Tensor | None:
        if len(held) <= self.window + self.sinks:
            return None
        out = held[self.sinks:len(held) - self.window]  # between the sinks and the window, by rank
        return out if len(out) else None

    def reasons(self, held: torch.Tensor) -> list[str]:
        """Why each held position is kept: "sink" or "recent"."""
        return ["sink" if i < self.sinks else "recent" for i in range(len(held))]


@dataclass
class HeavyHitters:
    """H2O: per layer and KV head, the newest `recent` positions plus the heaviest accumulated attention."""

    budget: int
    recent: int | None = None  # default: half the budget, as the paper splits it
    name: str = "h2o"
    per_head = True
    observes = True
    rerotate = False
    scores: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict, repr=False)  # (layer, row) -> (KV, S)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise InputError(f"budget must be a whole number >= 1, got {self.budget}")
        if self.recent is None:
            self.recent = self.budget // 2
        if not 0 <= self.recent <= self.budget:
            raise InputError(f"recent must be from 0 to the budget ({self.budget}), got {self.recent}")

    def observe(self, layer: int, row: int, pattern: torch.Tensor, start: int) -> None:
        votes = pattern.sum(dim=(1, 2))  # (KV, S): weight each key got from every new query of the group
        old = self.scores.get((layer, row))
        acc = torch.zeros_like(votes)
        if old is not None and start > 0:
            n = min(start, old.shape[1])
            acc[:, :n] = old[:, :n]  # positions from `start` on were rewritten: their old scores are stale
        self.scores[(layer, row)] = acc + votes

    def evict_heads(self, layer: int, row: int, held: list[torch.Tensor]) -> list[torch.Tensor | None]:
        scores = self.scores.get((layer, row))
        return [self._evict_one(pos, None if scores is None else scores[h]) for h, pos in enumerate(held)]

    def evict(self, layer: int, held: torch.Tensor) -> torch.Tensor | None:
        """One choice for every KV head (their scores summed), for callers without per-head eviction."""
        scores = self.scores.get((layer, 0))
        return self._evict_one(held, None if scores is None else scores.sum(0))

    def _evict_one(self, held: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor | None:
        if len(held) <= self.budget:
            return None
        older = held[:len(held) - self.recent]  # candidates: all but the `recent` newest
        n_heavy = self.budget - self.recent
        if scores is None or n_heavy == 0:
            return older[:len(older) - n_heavy] if n_heavy else older
        s = scores[older]
        keep = torch.zeros(len(older), dtype=torch.bool)
        keep[s.topk(n_heavy).indices] = True
        return older[~keep]

    def reasons(self, layer: int, row: int, head: int, held: torch.Tensor) -> list[tuple[str, float]]:
        """Why each held position of one KV head is kept ("recent" or "heavy hitter") and its score."""
        scores = self.scores.get((layer, row))
        n_recent_from = len(held) - self.recent
        return [("recent" if i >= n_recent_from else "heavy hitter",
                 0.0 if scores is None else float(scores[head, p])) for i, p in enumerate(held.tolist())]


@dataclass
class SnapKV:
    """SnapKV: compress the prompt once after prefill by the pooled votes of its last `window` positions."""

    budget: int
    window: int = SNAP_WINDOW
    kernel: int = SNAP_KERNEL
    name: str = "snapkv"
    per_head = True
    observes = True
    rerotate = False
    votes: dict[tuple[int, int], tuple[torch.Tensor, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise InputError(f"budget must be a whole number >= 1, got {self.budget}")
        if not 1 <= self.window <= self.budget:
            raise InputError(f"the observation window must be from 1 to the budget ({self.budget}), got {self.window}")

    def observe(self, layer: int, row: int, pattern: torch.Tensor, start: int) -> None:
        KV, _, T, S = pattern.shape
        w = min(self.window, T)
        if T <= 1 or S - w < 1:  # a decode step (SnapKV compresses only the prompt), or nothing before the window
            return
        votes = pattern[:, :, T - w:, :S - w].sum(dim=(1, 2))  # (KV, S - w): the window's votes on earlier keys
        pooled = F.max_pool1d(votes[:, None], self.kernel, stride=1, padding=self.kernel // 2)[:, 0]  # (KV, S - w)
        self.votes[(layer, row)] = (pooled, S - w)

    def evict_heads(self, layer: int, row: int, held: list[torch.Tensor]) -> list[torch.Tensor | None]:
        found = self.votes.pop((layer, row), None)
        if found is None:
            return [None] * len(held)
        pooled, prefix_end = found
        out: list[torch.Tensor | None] = []
        for h, pos in enumerate(held):
            prefix = pos[pos < prefix_end]
            n_keep = max(self.budget - (len(pos) - len(prefix)), 0)
            if len(pos) <= self.budget or len(prefix) <= n_keep:
                out.append(None)
                continue
            keep = torch.zeros(len(prefix), dtype=torch.bool)
            keep[pooled[h, prefix].topk(n_keep).indices] = True
            out.append(prefix[~keep])
        return out

    def evict(self, layer: int, held: torch.Tensor) -> torch.Tensor | None:
        outs = self.evict_heads(layer, 0, [held])
        return outs[0]


def make_policy(name: str, budget: int | None = None, sinks: int = 4, rerotate: bool = False) -> CachePolicy:
    """A fresh policy from its CLI/UI name (`POLICIES`); `budget` positions kept per layer (and KV head).
    InputError naming what is allowed for an unknown name, a missing or non-positive budget, or sinks not
    below the budget."""
    if name not in POLICIES:
        raise InputError(f"unknown policy {name!r}: the policies are {', '.join(POLICIES)}")
    if name == "full":
        return KeepAll()
    if budget is None:
        raise InputError(f"policy {name} needs a budget: a whole number >= 1 of positions each layer keeps")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise InputError(f"budget must be a whole number >= 1, got {budget!r}")
    if name == "window":
        return SlidingWindow(budget, 0, "window", rerotate)
    if name == "sinks":
        if not 0 < sinks < budget:
            raise InputError(f"sinks must be from 1 to budget - 1 ({budget - 1}), got {sinks}")
        return SlidingWindow(budget - sinks, sinks, "sinks", rerotate)
    if rerotate:
        raise InputError(f"re-rotated positions apply to the window family (window, sinks), not {name}")
    if name == "h2o":
        return HeavyHitters(budget)
    return SnapKV(budget, window=max(1, min(SNAP_WINDOW, budget // 2)))
