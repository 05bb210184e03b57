"""Qwen3-MoE: Qwen3's block (per-head q/k RMSNorms before RoPE) with a sparse mixture of experts as its
MLP (`mlp.gate`, `mlp.experts.{e}.gate_proj/up_proj/down_proj`, each expert `moe_intermediate_size` wide):
softmax over the experts, top-k, the k weights renormalised to sum to 1 only when `norm_topk_prob`."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block, QKNormAttention
from inspector.engine.moe import ListExperts

FEATURES = ("RMSNorm on each head's queries and keys (q_norm, k_norm)",
            "sparse mixture-of-experts MLP: softmax, top-k (renormalised when norm_topk_prob)")


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer, attention=QKNormAttention, mlp=ListExperts)
