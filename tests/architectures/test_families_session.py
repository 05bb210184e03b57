"""A family checkpoint on disk runs through the whole stack: loader, tokenizer, session, views.

Tiny random Gemma 2 (soft-caps, query_pre_attn_scalar), Gemma 3 and Phi-3 checkpoints written with
transformers' `save_pretrained`: `load_model` reads them (strict names, Phi-3's fused matrices), a Session
prefills a prompt longer than the sliding window and steps, and the attention views (recomputed from the
recorded queries and the cached keys) equal the patterns the model itself used, window and cap included.
A checkpoint whose tensor does not fit its config names the tensor.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.engine.config import SamplingParams
from inspector.engine.recording import FullRecorder
from inspector.errors import ModelLoadError
from inspector.models.loader import load_model
from inspector.session.session import Session
from tests.support.tiny import make_tiny_checkpoint

GREEDY = SamplingParams()
PROMPT = "The quick brown fox jumps over the lazy dog. Hello world! Tokenizers split text into pieces."
FAMILIES = {
    "gemma2": dict(sliding_window=6, query_pre_attn_scalar=24, attn_logit_softcapping=3.0, final_logit_softcapping=4.0),
    "gemma3_text": dict(sliding_window=6, query_pre_attn_scalar=16, rope_local_base_freq=100.0,
                        layer_types=["sliding_attention", "full_attention"]),
    "phi3": dict(sliding_window=6, pad_token_id=0),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def session(request, tmp_path_factory):
    directory = make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), model_type=request.param,
                                     **FAMILIES[request.param])
    s = Session(load_model(str(directory)))
    s.prefill(PROMPT, GREEDY, max_new_tokens=20)
    for _ in range(4):
        s.step(GREEDY)
    return s


def test_attention_views_equal_the_models_own_pattern(session):
    rec = FullRecorder()
    with torch.inference_mode():
        logits = session.model(torch.tensor([session.prompt_ids + session.generated_ids[:4]]), None, rec)
    P, cfg = len(session.prompt_ids), session.config
    assert P > cfg.sliding_window + 4  # the window hides keys from the later queries
    for layer in range(cfg.num_hidden_layers):
        full = rec.values[f"blocks.{layer}.attn.hook_pattern"][0]  # (H, S, S)
        for head in range(cfg.num_attention_heads):
            np.testing.assert_allclose(session.attention_pattern(0, layer, head), full[head, :P, :P].numpy(), atol=1e-5)
            np.testing.assert_allclose(session.attention_row(3, layer, head), full[head, P + 2, :P + 3].numpy(),
                                       atol=1e-5)
    # the session's greedy tokens are the argmax of one whole-sequence forward
    assert session.generated_ids[1:5] == logits[0, P - 1 + 1:P + 4].argmax(-1).tolist()


def test_a_tensor_that_does_not_fit_the_config_is_named(tmp_path):
    directory = make_tiny_checkpoint(tmp_path / "g", model_type="gemma3_text", sliding_window=6)
    state = load_file(str(directory / "model.safetensors"))
    state["model.layers.1.self_attn.q_norm.weight"] = torch.zeros(3)
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"model.layers.1.self_attn.q_norm.weight has shape \(3,\)"):
        load_model(str(directory))
    cfg = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**cfg, "model_type": "gemma"}))
    with pytest.raises(Exception, match="supported: llama, qwen2, qwen3, mistral, phi3, gemma2, gemma3_text"):
        load_model(str(directory))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_family_models_compute_their_dequantized_weights(family, tmp_path):
    """The Quantization lab's int8 copy of each family keeps the family's own tensors (q/k norms,
    post-norms, fused matrices, a second RoPE base): it computes exactly what the engine's fp32 model
    computes over its dequantized weights (loaded with strict names), and stays near the fp32 model."""
    from inspector.engine.model import Transformer
    from inspector.quant.model import quantize_model

    loaded = load_model(str(make_tiny_checkpoint(tmp_path / family, model_type=family, **FAMILIES[family])))
    q8 = quantize_model(loaded.model, "int8", int8_path="dequant")
    again = Transformer(loaded.config)
    again.load_state_dict(q8.dequantized_state(), strict=True)
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT)])
    with torch.inference_mode():
        fp32, got, want = loaded.model(ids), q8(ids), again(ids)
    assert float((got - want).abs().max()) < 1e-4
    assert float((got - fp32).abs().max()) < 0.25 * float(fp32.abs().max())
