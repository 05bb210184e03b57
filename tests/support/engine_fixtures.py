"""Helpers for the engine tests: tiny random HF models with our Transformer on the same weights.

`hf_pair(model_type, **overrides)` builds a transformers model of any family in `HF_CLASSES` (eager attention, weights drawn N(0, 0.1)
so the logits are not flat) and our `Transformer` loaded from its state dict with `strict=True`.
"""

from __future__ import annotations

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.linear import lay_out_weights
from inspector.engine.model import Transformer
from tests.support.tiny import HF_CLASSES

TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=False)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


def hf_pair(model_type: str = "llama", seed: int = 0, layout: str | None = None, **overrides):
    """(hf_model, our_model, config) on the same random weights, fp32, eval mode; `layout` "decode" or
    "batch" lays our weights out as `load_model` does (None: as loaded, one matrix per module)."""
    import transformers

    torch.manual_seed(seed)
    kw = {**TINY, **overrides}
    config_name, model_name = HF_CLASSES[model_type]
    hf_cfg = getattr(transformers, config_name)(**kw)
    cls = getattr(transformers, model_name)
    hf_cfg._attn_implementation = "eager"
    hf = cls(hf_cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    cfg = ModelConfig.from_hf(hf_cfg.to_dict())
    ours = Transformer(cfg).eval()
    sd = hf.state_dict()
    if cfg.tie_word_embeddings:
        sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    ours.load_state_dict(sd, strict=True)
    if layout is not None:
        lay_out_weights(ours, transposed=layout == "decode")
    return hf, ours, cfg


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    """Our Transformer alone, random weights (no transformers import)."""
    torch.manual_seed(seed)
    cfg = ModelConfig.from_hf({**TINY, "model_type": "llama", **overrides})
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    return model
