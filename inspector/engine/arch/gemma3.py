"""Gemma 3 (text): Gemma 2's block (see `gemma2`) with (1 + w) RMSNorms over each head's queries and keys
before RoPE, no attention soft-cap by default, five sliding-window layers to one global, and a RoPE base
of its own for the sliding layers (`rope_local_theta`, 10,000 against 1,000,000 on the global ones)."""

from __future__ import annotations

from inspector.engine.arch.gemma2 import GemmaQKNormAttention, SandwichBlock, mlp_class
from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block, GemmaRMSNorm

FEATURES = ("(1 + w) RMSNorms", "(1 + w) RMSNorm on each head's queries and keys",
            "post-attention and post-feed-forward norms", "GELU-tanh gated MLP", "embeddings scaled by sqrt(hidden)",
            "query_pre_attn_scalar", "5:1 sliding-window and global layers with two RoPE bases")


def build_block(config: ModelConfig, layer: int) -> Block:
    return SandwichBlock(config, layer, GemmaQKNormAttention, mlp_class(config), GemmaRMSNorm)
