"""Attention's math: the one place where scores are scaled, causally masked and softmaxed, and the masks
each forward's blocks of queries read with. (The attention layer, which calls these, is
`inspector.engine.layers.Attention`.)

The model's attention and every attention view go through these functions, so a view shows exactly
the weights the model used (up to the dtype the caller passes in).

- `attention_weights(q, k, q_pos, n_rep=1) -> probs`: q (B, H, T, d) queries at absolute positions
  `q_pos`, k (B, KV, S, d) keys at positions 0..S-1 of the same row; probs (B, H, T, S) fp32, the softmax
  of `q·k / sqrt(d)` over the keys a query may see (key position <= query position), exactly 0 elsewhere.
  `q_pos` is a (B, T) long tensor or an int (the first query's position; the others follow it).
- `attention_scores(q, k, q_pos, n_rep=1)`: the scaled scores in q's dtype, -inf where masked.
- `future_mask(q_pos, T, S)`: the boolean mask itself, True where a key lies after the query; None when
  no key does. The model builds it once per forward and passes it to `masked_scores` for every layer.
- `plan_forward(...) -> ForwardPlan`: for one forward of a batch of rows, each row's positions, its
  number of real (unpadded) tokens, and the blocks of queries the model attends with, each with the
  keys it reads and its mask. Built once per forward; every layer uses it.
- `window_mask(q_pos, T, S, window)`: True where a key lies `window` or more positions before its query
  (a sliding-window layer's extra mask, as transformers' `kv_idx > q_idx - window`); None when none does.
  `windowed(plan, window)` is the plan of a sliding layer: every block's mask also hides those keys.

Grouped-query attention: query head h reads KV head h // n_rep. The queries are grouped by KV head,
(B, H, T, d) -> (B*KV, n_rep*T, d), so one matmul per KV head serves its n_rep query heads without
copying K n_rep times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def query_positions(q_pos: torch.Tensor | int, B: int, T: int, device: torch.device | None = None) -> torch.Tensor:
    """(B, T) long positions from a (B, T) tensor or from the first position (an int)."""
    if isinstance(q_pos, int):
        return torch.arange(q_pos, q_pos + T, device=device).expand(B, T)  # (B, T)
    return q_pos


def future_mask(q_pos: torch.Tensor | int, T: int, S: int, device: torch.device | None = None) -> torch.Tensor | None:
    """(B or 1, 1, T, S) bool, True where key position > query position; None when nothing is masked.

    With an int first position, the (1, 1, T, S) mask is shared by every row; a tensor q_pos (B, T) gives
    each row its own."""
    if isinstance(q_pos, int):
        if q_pos >= S - 1:  # every query sees every key (e.g. a decode step's one query)
            return None
        visible = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=q_pos)  # (T, S): key j <= q_pos + i
        return ~visible[None, None]  # (1, 1, T, S)
    keys = torch.arange(S, device=q_pos.device)
    return (keys[None, None, :] > q_pos[:, :, None])[:, None]  # (B, 1, T, S)


def masked_scores(q: torch.Tensor, k: torch.Tensor, future: torch.Tensor | None, n_rep: int) -> torch.Tensor:
    """Scaled scores (B, H, T, S) in q's dtype with -inf where `future` is True (see `future_mask`)."""
    B, H, T, d = q.shape
    KV, S = k.shape[1], k.shape[2]
    qg = q.reshape(B * KV, n_rep * T, d)  # (B*KV, n_rep*T, d): the n_rep heads of a KV head, stacked
    kt = k.reshape(B * KV, S, d).transpose(1, 2)  # (B*KV, d, S)
    # alpha scales inside the product (beta=0 ignores the uninitialised first argument): one op, not two
    scores = torch.baddbmm(qg.new_empty(()).expand(B * KV, n_rep * T, S), qg, kt, beta=0, alpha=1 / math.sqrt(d))
    scores = scores.view(B, H, T, S)  # (B, H, T, S)
    if future is not None:
        scores = scores.masked_fill_(future, float("-inf"))  # in place: one (B, H, T, S) buffer, not two
    return scores


def softmax32(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys, computed and returned in fp32 (float64 scores stay float64)."""
    return F.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))


def attention_scores(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor | int, n_rep: int = 1) -> torch.Tensor:
    """Scaled, causally masked scores (B, H, T, S) in q's dtype (-inf where masked)."""
    T, S = q.shape[2], k.shape[2]
    return masked_scores(q, k, future_mask(q_pos, T, S, q.device), n_rep)


def attention_weights(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor | int, n_rep: int = 1) -> torch.Tensor:
    """Attention probabilities (B, H, T, S) fp32: each query's softmax over the keys at or before it."""
    return softmax32(attention_scores(q, k, q_pos, n_rep))


@dataclass(frozen=True)
class KeyBlock:
    """Queries t0..t1-1 of a forward read keys 0..n_keys-1; `future` masks the ones after each query."""

    t0: int
    t1: int
    n_keys: int
    future: torch.Tensor | None  # (B or 1, 1, t1 - t0, n_keys) bool, see `future_mask`


@dataclass(frozen=True)
class ForwardPlan:
    """Where one forward's queries sit and which keys each block of them reads (built once per forward).

    Row b holds counts[b] real new tokens (its first slots; the rest are padding) at positions
    starts[b], starts[b] + 1, ...; `counts` is None when every row's T slots are real. `first` is the
    shared first position when every row starts there with T real tokens (then the masks are shared by
    the rows); else None. `positions` (B, T) or (T,) when `first` is set, padded slots read as 0."""

    starts: list[int]
    counts: list[int] | None
    first: int | None
    positions: torch.Tensor
    blocks: list[KeyBlock]
    window: int | None = None  # set by `windowed`: the blocks' masks also hide keys this far back or more

    @property
    def n_keys(self) -> int:
        """Key positions the forward reads: the longest row's end."""
        return self.blocks[-1].n_keys


def plan_forward(B: int, T: int, starts: Sequence[int], positions: torch.Tensor | None, chunk: int,
                 device: torch.device | None = None) -> ForwardPlan:
    """The plan of a forward of T slots per row over rows already holding `starts` positions.

    `positions` None: every slot is real, row b at starts[b], starts[b] + 1, ... Otherwise (B, T) long:
    each row's real slots come first at exactly those positions and padded slots are negative; ValueError
    when they are not. Queries attend in blocks of `chunk` (each block reads only the keys it can see)."""
    starts = list(starts)
    counts: list[int] | None = None
    if positions is not None:
        counts = _check_positions(positions, B, T, starts)
        if all(n == T for n in counts):
            counts = None
    first = starts[0] if counts is None and all(s == starts[0] for s in starts) else None
    if first is not None:
        pos = torch.arange(first, first + T, device=device)  # (T,)
    else:
        n = torch.tensor(counts if counts is not None else [T] * B, device=device)
        ramp = torch.arange(T, device=device)
        pos = torch.tensor(starts, device=device)[:, None] + ramp  # (B, T)
        pos = pos.masked_fill(ramp >= n[:, None], 0)  # padded slots act as position 0 (finite, discarded)
    row_counts = counts if counts is not None else [T] * B
    blocks = []
    for t0 in range(0, T, chunk):
        t1 = min(t0 + chunk, T)
        # the block's last real query in each row sees keys up to its own position
        n_keys = max([s + min(t1, n) for s, n in zip(starts, row_counts) if n > t0], default=1)
        if first is not None:
            future = future_mask(first + t0, t1 - t0, n_keys, device)
        else:
            future = future_mask(pos[:, t0:t1], t1 - t0, n_keys)
        blocks.append(KeyBlock(t0, t1, n_keys, future))
    return ForwardPlan(starts, counts, first, pos, blocks)


def plan_mask(plan: ForwardPlan, T: int, S: int) -> torch.Tensor | None:
    """The future mask of all T queries of a planned forward over S keys, as one block (see `future_mask`);
    with the window's mask too for a `windowed` plan."""
    if plan.first is not None:
        future = future_mask(plan.first, T, S, plan.positions.device)
    else:
        future = future_mask(plan.positions, T, S)
    if plan.window is None:
        return future
    q_pos = plan.first if plan.first is not None else plan.positions
    return _either(future, window_mask(q_pos, T, S, plan.window, plan.positions.device))


def window_mask(q_pos: torch.Tensor | int, T: int, S: int, window: int,
                device: torch.device | None = None) -> torch.Tensor | None:
    """(B or 1, 1, T, S) bool, True where key position <= query position - window; None when no key is
    that far back. `q_pos` as in `future_mask`."""
    if isinstance(q_pos, int):
        if q_pos + T - 1 - window < 0:  # even the last query sees key 0
            return None
        # key j is too old for query i (at q_pos + i) when j <= q_pos + i - window
        return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=q_pos - window)[None, None]
    keys = torch.arange(S, device=q_pos.device)
    return (keys[None, None, :] <= q_pos[:, :, None] - window)[:, None]  # (B, 1, T, S)


def windowed(plan: ForwardPlan, window: int) -> ForwardPlan:
    """The same forward for a sliding-window layer: each block's mask also hides keys `window` or more
    positions before its query (see `window_mask`)."""
    blocks = []
    for blk in plan.blocks:
        Tb = blk.t1 - blk.t0
        if plan.first is not None:
            old = window_mask(plan.first + blk.t0, Tb, blk.n_keys, window, plan.positions.device)
        else:
            old = window_mask(plan.positions[:, blk.t0:blk.t1], Tb, blk.n_keys, window)
        blocks.append(KeyBlock(blk.t0, blk.t1, blk.n_keys, _either(blk.future, old)))
    return ForwardPlan(plan.starts, plan.counts, plan.first, plan.positions, blocks, window)


def _either(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """The union of two masks, either of which may be None (nothing masked)."""
    if a is None:
        return b
    return a if b is None else a | b


def _check_positions(positions: torch.Tensor, B: int, T: int, starts: list[int]) -> list[int]:
    """Real-token counts per row of a (B, T) positions tensor; ValueError unless it follows the contract."""
    if tuple(positions.shape) != (B, T):
        raise ValueError(f"positions has shape {tuple(positions.shape)}; the input ids are ({B}, {T})")
    counts = (positions >= 0).sum(dim=1).tolist()
    ramp = torch.arange(T, device=positions.device)
    expected = torch.tensor(starts, device=positions.device)[:, None] + ramp  # (B, T)
    real = ramp[None, :] < torch.tensor(counts, device=positions.device)[:, None]  # (B, T)
    if not torch.equal(positions >= 0, real) or not torch.equal(positions[real], expected[real]):
        raise ValueError("positions must give each row's real tokens first, at the row's cache length, "
                         f"length + 1, ... (cache lengths {starts}), and -1 for padded slots after them")
    return counts
