"""Mistral: the Llama block; what differs is the mask. With a `sliding_window` every layer attends only
to the window's latest positions (the model hands sliding layers a `windowed` plan); the KV cache keeps
every position, the older ones masked."""

from __future__ import annotations

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block

FEATURES = ("sliding-window attention in every layer",)


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer)
