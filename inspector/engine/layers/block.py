"""Decoder blocks: the residual stream's data flow through one layer's attention and MLP.

- `Block`: the Llama block, x + attn(norm(x)), then h + mlp(norm(h)), over the Llama parts.
- `PartsBlock`: the same flow over the attention, MLP and norm classes a family picks.
- `SandwichBlock`: Gemma's, with norms before and after both attention and the MLP.
- `SparseBlock`: the parts block whose MLP is named `block_sparse_moe` (Mixtral, Granite);
  `ScaledResidualBlock`: Granite's, attention and MLP outputs times `residual_multiplier` before the adds.
`forward(x (B, T, D), cos, sin, cache, plan, rec) -> (B, T, D)`, recording `hook_resid_pre`,
`ln1.hook_normalized`, `hook_attn_out`, `hook_resid_mid`, `ln2.hook_normalized`, `hook_mlp_out`,
`hook_resid_post` (the sandwich block also `hook_attn_out_raw` / `hook_mlp_out_raw` before its post-norms:
then `hook_attn_out` / `hook_mlp_out` are the post-normed tensors the residual stream adds).
"""

from __future__ import annotations

import torch
from torch import nn

from inspector.engine.attention import ForwardPlan
from inspector.engine.config import FULL, ModelConfig
from inspector.engine.kv_cache import KVCache
from inspector.engine.layers.attention import Attention
from inspector.engine.layers.linear import NoHooks
from inspector.engine.layers.mlp import MLP
from inspector.engine.layers.norm import RMSNorm
from inspector.engine.trace import Recorder, record


class Block(NoHooks, nn.Module):
    kind = FULL  # how its attention masks keys (config.layer_type); set per layer by arch.build_block

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config, layer)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        p = f"blocks.{self.layer}."
        x = record(rec, p + "hook_resid_pre", x)
        normed = record(rec, p + "ln1.hook_normalized", self.input_layernorm(x))
        attn_out = record(rec, p + "hook_attn_out", self.self_attn(normed, cos, sin, cache, plan, rec))
        h = record(rec, p + "hook_resid_mid", x + attn_out)
        normed = record(rec, p + "ln2.hook_normalized", self.post_attention_layernorm(h))
        mlp_out = record(rec, p + "hook_mlp_out", self.mlp(normed, rec))
        return record(rec, p + "hook_resid_post", h + mlp_out)


class PartsBlock(Block):
    """The Llama block's data flow over the family's attention, MLP and norm classes."""

    mlp_name = "mlp"  # the MLP's module name in the checkpoint

    def __init__(self, config: ModelConfig, layer: int, attention: type, mlp: type, norm: type) -> None:
        nn.Module.__init__(self)
        self.layer = layer
        D, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = norm(D, eps)
        self.self_attn = attention(config, layer)
        self.post_attention_layernorm = norm(D, eps)
        setattr(self, self.mlp_name, mlp(config, layer))


class SparseBlock(PartsBlock):
    """A block whose MLP (a mixture of experts) has HF's module name `block_sparse_moe` (Mixtral, Granite);
    `mlp` reads it."""

    mlp_name = "block_sparse_moe"

    @property
    def mlp(self) -> nn.Module:
        return self._modules["block_sparse_moe"]


class ScaledResidualBlock(SparseBlock):
    """Granite's block: attention's and the MLP's outputs times `residual_multiplier` before each residual
    add (`hook_attn_out` / `hook_mlp_out` are the scaled tensors, what the residual stream adds)."""

    def __init__(self, config: ModelConfig, layer: int, attention: type, mlp: type, norm: type) -> None:
        super().__init__(config, layer, attention, mlp, norm)
        self.residual_multiplier = config.residual_multiplier

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        p, m = f"blocks.{self.layer}.", self.residual_multiplier
        x = record(rec, p + "hook_resid_pre", x)
        normed = record(rec, p + "ln1.hook_normalized", self.input_layernorm(x))
        attn_out = record(rec, p + "hook_attn_out", self.self_attn(normed, cos, sin, cache, plan, rec) * m)
        h = record(rec, p + "hook_resid_mid", x + attn_out)
        normed = record(rec, p + "ln2.hook_normalized", self.post_attention_layernorm(h))
        mlp_out = record(rec, p + "hook_mlp_out", self.mlp(normed, rec) * m)
        return record(rec, p + "hook_resid_post", h + mlp_out)


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
