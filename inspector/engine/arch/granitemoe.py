"""Granite-MoE: the Llama block with Granite's multipliers and a sparse mixture of experts as its MLP
(`block_sparse_moe`: `router.layer`, every expert's gate and up in `input_linear`, down in `output_linear`).
- scores q.k times `attention_multiplier` (not head_dim^-1/2);
- attention's and the MLP's outputs times `residual_multiplier` before each residual add;
- embeddings times `embedding_multiplier` and logits divided by `logits_scaling` (the model does those);
- routing: the top-k router logits, then a softmax over those k."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers.attention import ScaledAttention
from inspector.engine.layers.block import Block, ScaledResidualBlock
from inspector.engine.layers.moe import StackedExperts
from inspector.engine.layers.norm import RMSNorm

FEATURES = ("embedding, attention and residual multipliers; logits divided by logits_scaling",
            "sparse mixture-of-experts MLP (block_sparse_moe): top-k of the router logits, then softmax")


def build_block(config: ModelConfig, layer: int) -> Block:
    return ScaledResidualBlock(config, layer, ScaledAttention, StackedExperts, RMSNorm)
