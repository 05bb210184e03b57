"""Phi-3: the Llama block with q/k/v in one `qkv_proj` matrix (rows: q heads, k heads, v heads) and
gate/up in one `gate_up_proj` (rows: gate, then up), as its checkpoints store them. They are the stacked
layouts `inspector.engine.linear` builds for Llama, so each runs as one product; a sliding window, when the
config sets one, applies to every layer."""

from __future__ import annotations

import torch
from torch import nn

from inspector.engine.config import ModelConfig
from inspector.engine.layers import MLP, Attention, Block
from inspector.engine.linear import Linear
from inspector.engine.trace import Recorder, record

FEATURES = ("fused q/k/v (qkv_proj) and gate/up (gate_up_proj) weights",)


class FusedAttention(Attention):
    """Attention whose q/k/v projection is one `qkv_proj` Linear."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        nn.Module.__init__(self)
        self.layer = layer
        self.n_heads, self.n_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.n_rep = config.n_rep
        D, d = config.hidden_size, config.head_dim
        self.qkv_proj = Linear(D, (self.n_heads + 2 * self.n_kv_heads) * d, bias=False)
        self.o_proj = Linear(self.n_heads * d, D, bias=False)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv_proj(x)  # (B, T, (H + 2KV) * d)


class FusedMLP(MLP):
    """SwiGLU whose gate and up projections are one `gate_up_proj` Linear."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        nn.Module.__init__(self)
        self.layer = layer
        self.gate_up_proj = Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # (B, T, I) each
        gate = record(rec, f"blocks.{self.layer}.mlp.hook_pre", gate)
        act = record(rec, f"blocks.{self.layer}.mlp.hook_post", self.activation(gate) * up)
        return self.down_proj(act)


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer, attention=FusedAttention, mlp=FusedMLP)
