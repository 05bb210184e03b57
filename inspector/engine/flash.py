"""Tiled attention with the online softmax (FlashAttention's forward, Dao et al. 2022), in plain PyTorch.

`tiled_attend(q, k, v, q_pos, hidden, n_rep, tile) -> z` computes the same attention as the standard path
(`inspector.engine.scores`: scores, mask, softmax, weighted sum) without ever holding the T x S score
matrix: it reads K and V in tiles of `tile` key positions and keeps, per query row, the running maximum m
of its scores, the running sum l of exp(score - m) and the unnormalised output acc. For each tile:

    s = q·k_tile / sqrt(d) (masked: future keys, evicted keys)      (B, H, T, tile)
    m' = max(m, rowmax(s));  alpha = exp(m - m');  p = exp(s - m')
    l  = alpha * l + rowsum(p);  acc = alpha * acc + p @ v_tile;  m = m'

and finally z = acc / l. Shapes: q (B, H, T, d) at positions `q_pos` (an int: the first query's position,
shared by every row; or a (B, T) long tensor), k, v (B, KV, S, d) of positions 0..S-1; `hidden`
(B, 1 or H, 1, S) bool marks evicted keys. Grouped-query: query head h reads KV head h // n_rep.

`step_through(q, k, v, q0, tile)` runs the same loop for one head of one prefill and returns every tile's
state (`TileStep`: the key range read, m and l per query row, the output so far rescaled by 1/l), for the
step-through view. `hbm_bytes(T, S, d, bytes_per, block_rows)` gives, by formula, the bytes a GPU kernel
moves to and from HBM with and without materialising the score matrix (the tiled count in FlashAttention-2's
loop order, Dao 2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

TILE = 64  # key positions per tile


def _tile_mask(q_pos: torch.Tensor | int, T: int, s0: int, s1: int, hidden: torch.Tensor | None,
               device: torch.device) -> torch.Tensor | None:
    """(B or 1, 1 or H, T, s1 - s0) bool, True where a key of this tile is hidden from a query."""
    keys = torch.arange(s0, s1, device=device)
    if isinstance(q_pos, int):
        if q_pos >= s1 - 1:
            future = None  # every key of the tile is at or before the first query
        else:
            rows = torch.arange(q_pos, q_pos + T, device=device)
            future = (keys[None, :] > rows[:, None])[None, None]  # (1, 1, T, tile)
    else:
        future = (keys[None, None, :] > q_pos[:, :, None])[:, None]  # (B, 1, T, tile)
    if hidden is None:
        return future
    h = hidden[..., s0:s1]  # (B, 1 or H, 1, tile)
    return h if future is None else future | h


def tiled_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor | int,
                 hidden: torch.Tensor | None, n_rep: int, tile: int = TILE) -> torch.Tensor:
    """Attention output (B, H, T, d) by tiles of keys with the online softmax (see the module docstring)."""
    B, H, T, d = q.shape
    KV, S = k.shape[1], k.shape[2]
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 as the standard softmax; float64 stays float64
    qg = q.to(acc_dtype).reshape(B * KV, n_rep * T, d)  # (B*KV, n_rep*T, d): a KV head's query heads stacked
    m = q.new_full((B * KV, n_rep * T), float("-inf"), dtype=acc_dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros((B * KV, n_rep * T, d), dtype=acc_dtype, device=q.device)
    scale = 1 / math.sqrt(d)
    for s0 in range(0, S, tile):
        s1 = min(s0 + tile, S)
        kt = k[:, :, s0:s1].to(acc_dtype).reshape(B * KV, s1 - s0, d)  # (B*KV, tile, d)
        vt = v[:, :, s0:s1].to(acc_dtype).reshape(B * KV, s1 - s0, d)
        # scaled inside the product, as the standard path's `masked_scores` does (the same rounding)
        s = torch.baddbmm(qg.new_empty(()).expand(B * KV, n_rep * T, s1 - s0), qg, kt.transpose(1, 2), beta=0,
                          alpha=scale)  # (B*KV, n_rep*T, tile)
        mask = _tile_mask(q_pos, T, s0, s1, hidden, q.device)
        if mask is not None:
            s = s.view(B, H, T, s1 - s0).masked_fill(mask, float("-inf")).view(B * KV, n_rep * T, s1 - s0)
        m_new = torch.maximum(m, s.amax(dim=-1))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows with nothing seen yet
        alpha = torch.exp(m - safe)  # exp(-inf) = 0 on the first tile a row sees
        p = torch.exp(s - safe[..., None])  # (B*KV, n_rep*T, tile); masked keys give exp(-inf) = 0
        l = alpha * l + p.sum(dim=-1)
        acc = alpha[..., None] * acc + torch.bmm(p, vt)
        m = m_new
    z = acc / l[..., None]  # (B*KV, n_rep*T, d)
    return z.view(B, H, T, d).to(q.dtype)


@dataclass(frozen=True)
class TileStep:
    """The state after reading one tile of keys, for one head (numpy, float32)."""

    s0: int
    s1: int
    m: np.ndarray  # (T,) running max per query row
    l: np.ndarray  # (T,) running sum of exp(score - m)
    out: np.ndarray  # (T, d) output so far: acc / l (what the rows would output if the keys ended here)
    weights: np.ndarray  # (T, s1 - s0) this tile's exp(s - m) before the final normalisation


def step_through(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q0: int = 0, tile: int = TILE) -> list[TileStep]:
    """One head: q (T, d) at positions q0.., k, v (S, d) at 0..S-1; every tile's state (causal mask)."""
    T, d = q.shape
    steps = []
    m = torch.full((T,), float("-inf"))
    l, acc = torch.zeros(T), torch.zeros(T, d)
    rows = torch.arange(q0, q0 + T)
    for s0 in range(0, k.shape[0], tile):
        s1 = min(s0 + tile, k.shape[0])
        s = (q.float() @ k[s0:s1].float().T) / math.sqrt(d)  # (T, tile)
        s = s.masked_fill(torch.arange(s0, s1)[None, :] > rows[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha, p = torch.exp(m - safe), torch.exp(s - safe[:, None])
        l = alpha * l + p.sum(-1)
        acc = alpha[:, None] * acc + p @ v[s0:s1].float()
        m = m_new
        out = torch.where(l[:, None] > 0, acc / l.clamp(min=1e-30)[:, None], torch.zeros_like(acc))
        steps.append(TileStep(s0, s1, m.numpy().copy(), l.numpy().copy(), out.numpy().copy(), p.numpy().copy()))
    return steps


def hbm_bytes(T: int, S: int, d: int, bytes_per: int = 2, block_rows: int = 128) -> dict[str, int]:
    """Bytes moved to and from GPU memory (HBM) by one head's attention, by formula, not measured.

    standard: read Q (T·d), K and V (2·S·d), write the scores (T·S), read them for the softmax, write the
    probabilities, read them for P·V (4·T·S in all), write O (T·d). tiled, in FlashAttention-2's loop order
    (Dao 2023, Algorithm 1: the outer loop over blocks of query rows, the inner one over blocks of keys):
    read Q and write O once (2·T·d); K and V are read once per block of `block_rows` query rows kept on chip
    (2·S·d·ceil(T / block_rows)); the T x S matrix never leaves the chip. Not counted: the per-row
    logsumexp FA-2 also writes for the backward (T numbers), and the key blocks a causal kernel skips
    above the diagonal (about half of them in a prefill, where T = S)."""
    standard = bytes_per * (2 * T * d + 2 * S * d + 4 * T * S)
    tiled = bytes_per * (2 * T * d + 2 * S * d * math.ceil(T / block_rows))
    return {"standard": standard, "tiled": tiled}
