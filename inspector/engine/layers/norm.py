"""RMSNorms: x / rms(x) * w (Llama and most families) and Gemma's x / rms(x) * (1 + w), both computed in fp32."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.layers.linear import NoHooks


class RMSNorm(NoHooks, nn.Module):
    """x / rms(x) * weight, computed in fp32 (as HF LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.rms_norm computes x * rsqrt(mean(x^2) + eps) * weight in that order, bit for bit HF's formula in
        # fp32, in one call instead of six (a decode step norms 61 times)
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if x.device.type == "cpu":  # the CPU kernel computes in fp32 and rounds once: HF's rounding, two copies fewer
            return self.weight * F.rms_norm(x, self.weight.shape, None, self.eps)
        return self.weight * F.rms_norm(x.float(), self.weight.shape, None, self.eps).to(x.dtype)  # fp32 statistics



class GemmaRMSNorm(RMSNorm):
    """x / rms(x) * (1 + weight), computed in fp32 and rounded once at the end (as transformers' Gemma)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__(dim, eps)
        nn.init.zeros_(self.weight)  # (1 + 0): the identity scale, as a fresh Gemma norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        inv_rms = x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()  # (..., 1)
        out = x32 * inv_rms * (1.0 + self.weight.float())
        return out if x.dtype == torch.float32 else out.to(x.dtype)
