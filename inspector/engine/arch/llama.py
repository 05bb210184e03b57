"""Llama (also SmolLM and Qwen2): the block of `inspector.engine.layers` as it is."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block

FEATURES: tuple[str, ...] = ()


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer)
