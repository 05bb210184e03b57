"""Qwen3: the Llama block with an RMSNorm over each head's queries and keys before RoPE (`q_norm`,
`k_norm`, traced as `attn.hook_q_normed` / `attn.hook_k_normed`) and no q/k/v biases."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block, QKNormAttention

FEATURES = ("RMSNorm on each head's queries and keys (q_norm, k_norm)",)


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer, attention=QKNormAttention)
