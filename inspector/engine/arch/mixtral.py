"""Mixtral: the Mistral block with a sparse mixture of experts as its MLP (`block_sparse_moe`): a router
(`gate`) picks the top-k of the softmax over the experts and renormalises their weights to sum to 1; each
expert is a SwiGLU named w1 (gate), w3 (up), w2 (down). A `sliding_window`, when set, applies to every layer."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block
from inspector.engine.moe import MixtralExperts, SparseBlock

FEATURES = ("sparse mixture-of-experts MLP (block_sparse_moe): softmax, top-k, weights renormalised",)


def build_block(config: ModelConfig, layer: int) -> Block:
    return SparseBlock(config, layer, mlp=MixtralExperts)
