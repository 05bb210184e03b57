"""Parts several families share: Gemma's (1 + w) RMSNorm, per-head q/k norms, GELU-tanh, a block built
from chosen parts, and the sandwich block (post-norms after attention and MLP).

Trace points they add (see `inspector.engine.trace`): `attn.hook_q_normed` / `attn.hook_k_normed` after
the q/k norms, and `hook_attn_out_raw` / `hook_mlp_out_raw` before the post-norms (then `hook_attn_out` /
`hook_mlp_out` are the post-normed tensors the residual stream adds).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.attention import ForwardPlan
from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import MLP, Attention, Block, RMSNorm, record
from inspector.engine.trace import Recorder


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


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (transformers' gelu_pytorch_tanh)."""
    return F.gelu(x, approximate="tanh")


class GeluMLP(MLP):
    """down(gelu_tanh(gate(x)) * up(x)): Gemma's gated MLP."""

    activation = staticmethod(gelu_tanh)


def mlp_class(config: ModelConfig) -> type:
    return GeluMLP if config.hidden_act == "gelu_pytorch_tanh" else MLP


class QKNormAttention(Attention):
    """Attention with an RMSNorm over each head's queries (`q_norm`) and keys (`k_norm`) before RoPE."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        norm = GemmaRMSNorm if config.gemma else RMSNorm
        self.q_norm = norm(config.head_dim, config.rms_norm_eps)
        self.k_norm = norm(config.head_dim, config.rms_norm_eps)

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor, rec: Recorder | None) -> tuple[torch.Tensor, torch.Tensor]:
        p = f"blocks.{self.layer}.attn."
        return record(rec, p + "hook_q_normed", self.q_norm(q)), record(rec, p + "hook_k_normed", self.k_norm(k))


class PartsBlock(Block):
    """The Llama block's data flow over the family's attention, MLP and norm classes."""

    def __init__(self, config: ModelConfig, layer: int, attention: type, mlp: type, norm: type) -> None:
        nn.Module.__init__(self)
        self.layer = layer
        D, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = norm(D, eps)
        self.self_attn = attention(config, layer)
        self.post_attention_layernorm = norm(D, eps)
        self.mlp = mlp(config, layer)


class SandwichBlock(PartsBlock):
    """Gemma's block: norms before and after both attention and MLP. `post_attention_layernorm` (HF's
    name) normalises attention's output; `pre_feedforward_layernorm` the MLP's input."""

    def __init__(self, config: ModelConfig, layer: int, attention: type, mlp: type, norm: type) -> None:
        super().__init__(config, layer, attention, mlp, norm)
        self.pre_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        self.post_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        p = f"blocks.{self.layer}."
        x = record(rec, p + "hook_resid_pre", x)
        normed = record(rec, p + "ln1.hook_normalized", self.input_layernorm(x))
        raw = record(rec, p + "hook_attn_out_raw", self.self_attn(normed, cos, sin, cache, plan, rec))
        attn_out = record(rec, p + "hook_attn_out", self.post_attention_layernorm(raw))
        h = record(rec, p + "hook_resid_mid", x + attn_out)
        normed = record(rec, p + "ln2.hook_normalized", self.pre_feedforward_layernorm(h))
        raw = record(rec, p + "hook_mlp_out_raw", self.mlp(normed, rec))
        mlp_out = record(rec, p + "hook_mlp_out", self.post_feedforward_layernorm(raw))
        return record(rec, p + "hook_resid_post", h + mlp_out)
