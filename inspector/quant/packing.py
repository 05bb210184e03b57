"""Quantize, pack, unpack and dequantize weight matrices: pure functions on (N, K) fp32 tensors.

A weight (N, K) maps K inputs to N outputs (nn.Linear layout); an embedding (V, D) is the same matrix
read by rows, and for a tied model it is also the LM head, so one quantized copy serves both.

- int8, symmetric per output channel: scale[n] = max|w[n, :]| / 127, q = round(w / scale) in [-127, 127],
  w ≈ q * scale. Error bound: |w - w'| <= scale[n] / 2 (a row of zeros gets scale 1 and is exact).
- int4, asymmetric per group of `group` consecutive inputs of a row (as GGUF's Q4_1): zero = the group's
  minimum, scale = (max - min) / 15, q = round((w - zero) / scale) in [0, 15], w ≈ q * scale + zero.
  scale and zero are held in fp16 (16 bits each, as Q4_1); they are rounded so that zero <= min and
  zero + 15 * scale >= max, hence the bound |w - w'| <= scale / 2 holds for the stored fp16 values.
  Two 4-bit values per byte: column 2j in the low nibble, 2j + 1 in the high one.
"""

from __future__ import annotations

import torch

FP16_TINY = 2.0 ** -24  # the smallest positive fp16 (a subnormal): absolute rounding slack near zero


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float -> (q int8 (N, K), scale fp32 (N,))."""
    w = w.float()
    scale = w.abs().amax(dim=1) / 127.0  # (N,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(q int8 (N, K), scale (N,)) -> fp32 (N, K)."""
    return q.float() * scale[:, None]


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(N, K) integers in [0, 15], K even -> (N, K/2) uint8, two per byte (low nibble = even column)."""
    N, K = q.shape
    pairs = q.to(torch.uint8).view(N, K // 2, 2)  # (N, K/2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """(N, K/2) uint8 -> (N, K) uint8 in [0, 15] (the inverse of `pack_int4`)."""
    N, half = packed.shape
    return torch.stack((packed & 15, packed >> 4), dim=-1).view(N, 2 * half)  # (N, K)


def quantize_int4(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, K) float, K a multiple of `group` (even) -> (packed uint8 (N, K/2), scale fp16 (N, K/group),
    zero fp16 (N, K/group))."""
    N, K = w.shape
    if group <= 0 or group % 2 or K % group:
        raise ValueError(f"group size {group} must be even and divide the input dimension {K}")
    g = w.float().view(N, K // group, group)  # (N, groups, group)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)  # (N, groups)
    # fp16 round-to-nearest moves a value by at most 2^-11 of itself: step down/up first so that the
    # stored zero is <= min and zero + 15 * scale >= max (every weight inside the representable range).
    zero = (lo - lo.abs() * 2.0 ** -10 - FP16_TINY).half()
    z32 = zero.float()
    scale = ((hi - z32) / 15.0 * (1 + 2.0 ** -10) + FP16_TINY).half()
    s32 = scale.float()
    q = torch.round((g - z32[..., None]) / s32[..., None]).clamp_(0, 15)  # (N, groups, group)
    return pack_int4(q.view(N, K)), scale, zero


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """(packed (N, K/2), scale (N, G), zero (N, G)) -> fp32 (N, K), K/G weights per group."""
    N, G = scale.shape
    q = unpack_int4(packed).view(N, G, -1).float()  # (N, G, group)
    return (q * scale.float()[..., None] + zero.float()[..., None]).view(N, -1)  # (N, K)


def int4_bound(scale: torch.Tensor, group: int) -> torch.Tensor:
    """Per weight (N, K): the largest error int4 round-to-nearest may make, scale / 2 of its group."""
    return (scale.float() / 2).repeat_interleave(group, dim=1)
