"""Granite-MoE: the Llama block with Granite's multipliers and a sparse mixture of experts as its MLP
(`block_sparse_moe`: `router.layer`, every expert's gate and up in `input_linear`, down in `output_linear`).
- scores q.k times `attention_multiplier` (not head_dim^-1/2);
- attention's and the MLP's outputs times `residual_multiplier` before each residual add;
- embeddings times `embedding_multiplier` and logits divided by `logits_scaling` (the model does those);
- routing: the top-k router logits, then a softmax over those k."""

from __future__ import annotations

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import KVCache
from inspector.engine.layers import Block, ScaledAttention
from inspector.engine.moe import SparseBlock, StackedExperts
from inspector.engine.scores import ForwardPlan
from inspector.engine.trace import Recorder, record

FEATURES = ("embedding, attention and residual multipliers; logits divided by logits_scaling",
            "sparse mixture-of-experts MLP (block_sparse_moe): top-k of the router logits, then softmax")


class ScaledResidualBlock(SparseBlock):
    """Granite's block: attention's and the MLP's outputs times `residual_multiplier` before each residual
    add (`hook_attn_out` / `hook_mlp_out` are the scaled tensors, what the residual stream adds)."""

    def __init__(self, config: ModelConfig, layer: int, attention: type | None = None, mlp: type | None = None,
                 norm: type | None = None) -> None:
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


def build_block(config: ModelConfig, layer: int) -> Block:
    return ScaledResidualBlock(config, layer, attention=ScaledAttention, mlp=StackedExperts)
