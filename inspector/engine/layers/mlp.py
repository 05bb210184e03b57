"""Gated MLPs: SwiGLU down(silu(gate(x)) * up(x)) (Llama and most families) and Gemma's GELU-tanh variant.

`MLP(config, layer)` holds HF's `gate_proj`, `up_proj`, `down_proj`; `forward(x (B, T, D), rec) -> (B, T, D)`,
recording `mlp.hook_pre` (the gate) and `mlp.hook_post` (activation times up). Gate and up run as one
product when `lay_out_weights` stacked their weights. `mlp_class(config)` picks the family's class.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.config import ModelConfig
from inspector.engine.layers.linear import Linear, NoHooks
from inspector.engine.linear import GATE_UP, project, stacked_weight
from inspector.engine.trace import Recorder, record


class MLP(NoHooks, nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)); a family may set another `activation` (Gemma's GELU-tanh)."""

    activation = staticmethod(F.silu)

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        weight = stacked_weight(self, GATE_UP)
        if weight is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = project(x, weight).chunk(2, dim=-1)  # (B, T, I) each, views of one product
        gate = record(rec, f"blocks.{self.layer}.mlp.hook_pre", gate)
        act = record(rec, f"blocks.{self.layer}.mlp.hook_post", self.activation(gate) * up)
        return self.down_proj(act)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (transformers' gelu_pytorch_tanh)."""
    return F.gelu(x, approximate="tanh")


class GeluMLP(MLP):
    """down(gelu_tanh(gate(x)) * up(x)): Gemma's gated MLP."""

    activation = staticmethod(gelu_tanh)


def mlp_class(config: ModelConfig) -> type:
    """The config's gated MLP: GELU-tanh (`hidden_act` gelu_pytorch_tanh) or SwiGLU."""
    return GeluMLP if config.hidden_act == "gelu_pytorch_tanh" else MLP
