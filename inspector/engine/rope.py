"""Rotary position embeddings (RoPE), Hugging Face's rotate_half layout: the inverse frequencies (with
Llama 3 scaling, or a sliding layer's own base), cos/sin at any positions, and the rotation itself.

`rope_inv_freq(config, theta=None) -> (head_dim/2,)`; `rope_cos_sin(inv_freq, positions, dtype)` -> cos, sin
of shape (*positions.shape, head_dim); `apply_rope(x, cos, signed_sin(sin))` rotates (..., head_dim). The
model, the KV cache's re-rotation of kept keys and the views all use these, so a key is rotated one way.
"""

from __future__ import annotations

import math

import torch

from inspector.engine.config import ModelConfig


def rope_inv_freq(config: ModelConfig, theta: float | None = None) -> torch.Tensor:
    """Inverse frequencies (head_dim/2,), with Llama 3 scaling when `rope_scaling` asks for it; `theta`
    (a sliding layer's own base) replaces rope_theta and its scaling."""
    d = config.head_dim
    base = config.rope_theta if theta is None else theta
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if theta is not None:
        return inv_freq
    s = config.rope_scaling
    if s is None:
        return inv_freq
    # Llama 3: keep high frequencies, divide low ones by `factor`, blend smoothly in between.
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"]
    )
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (*positions.shape, head_dim) for the given positions (HF layout: halves repeated)."""
    freqs = positions.float()[..., None] * inv_freq  # (..., T, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (..., T, head_dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with its first half negated: what `apply_rope` multiplies the half-rolled x by."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotate (..., head_dim) by position: x*cos + rotate_half(x)*sin, HF's rotate_half RoPE.

    rotate_half(x) = cat(-x2, x1) is x rolled by half a head with its first half negated; the negation
    is moved onto sin (`signed_sin`, exact in floating point), so the rotation is one roll."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed
