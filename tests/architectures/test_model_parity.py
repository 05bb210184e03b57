"""Our forward equals transformers' LlamaForCausalLM / Qwen2ForCausalLM on the same weights.

Tiny random models cover GQA and MHA, tied and untied embeddings, attention biases, llama3 rope scaling
and Qwen2's q/k/v biases: logits at every position within 1e-5 (fp32), with and without the KV cache.
The real default model: 40 greedy tokens of a chat prompt give exactly transformers' ids (slow).
"""

from __future__ import annotations

import pytest
import torch

from inspector.engine import steps as engine
from inspector.engine.config import SamplingParams
from inspector.session.session import Session
from tests.support.engine_fixtures import LLAMA3_ROPE, hf_pair

CASES = {
    "llama-gqa-untied": ("llama", dict(num_key_value_heads=2, tie_word_embeddings=False)),
    "llama-mha-tied": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "llama-gqa-tied-bias": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True, attention_bias=True)),
    "llama-mha-llama3-rope": ("llama", dict(num_key_value_heads=4, rope_scaling=LLAMA3_ROPE)),
    "qwen2-gqa": ("qwen2", dict(num_key_value_heads=2)),
    "qwen2-tied": ("qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True)),
}


@pytest.mark.parametrize("layout", [None, "decode", "batch"])
@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers_at_every_position(case, layout):
    model_type, overrides = CASES[case]
    hf, ours, cfg = hf_pair(model_type, layout=layout, **overrides)
    ids = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits  # (1, 40, V)
        got = ours(ids)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() < 1e-5
    # The same logits through the cache: a 24-token prefill, then one token at a time.
    cache = engine.new_cache(ours)
    rows = [engine.prefill(ours, ids[0, :24].tolist(), cache)]
    for t in range(24, 39):
        rows.append(engine.decode_step(ours, int(ids[0, t]), cache))
    cached = torch.stack(rows)  # (16, V): next-token logits after positions 23..38
    assert cache.length == 39
    assert (cached - expected[0, 23:39]).abs().max().item() < 1e-5


@pytest.mark.parametrize("chunk", [1, 7, 16])
def test_blocked_attention_of_long_forwards_matches_transformers(chunk, monkeypatch):
    """Forwards longer than ATTN_CHUNK attend block by block (each block over the keys it can see): the
    logits must not change, also for a forward that starts after cached positions."""
    import inspector.engine.model

    monkeypatch.setattr(inspector.engine.model, "ATTN_CHUNK", chunk)
    hf, ours, cfg = hf_pair("llama", num_key_value_heads=2)
    ids = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(ids).logits  # (1, 40, V)
        assert (ours(ids) - expected).abs().max().item() < 1e-5
        cache = engine.new_cache(ours)
        ours(ids[:, :9], cache)
        cache.advance(9)
        rest = ours(ids[:, 9:], cache)  # 31 new queries after 9 cached positions, in blocks
    assert (rest - expected[:, 9:]).abs().max().item() < 1e-5


def test_config_flags_reach_the_model():
    """The cases above really exercise what they claim (biases present, rope scaled, heads grouped)."""
    _, ours, cfg = hf_pair("qwen2", num_key_value_heads=2)
    attn = ours.model.layers[0].self_attn
    assert attn.q_proj.bias is not None and attn.o_proj.bias is None and cfg.n_rep == 2
    _, ours, cfg = hf_pair("llama", attention_bias=True, tie_word_embeddings=True)
    assert ours.model.layers[0].self_attn.o_proj.bias is not None and not hasattr(ours, "lm_head")
    _, scaled, _ = hf_pair("llama", rope_scaling=LLAMA3_ROPE)
    _, plain, _ = hf_pair("llama")
    assert not torch.allclose(scaled.inv_freq, plain.inv_freq)


@pytest.mark.slow
def test_default_model_greedy_chat_equals_transformers(default_model):
    import transformers

    hf = transformers.LlamaForCausalLM.from_pretrained(
        default_model.weights_path, dtype=torch.float32, attn_implementation="eager").eval()
    session = Session(default_model, record=False)
    params = SamplingParams(temperature=0.0)
    session.prefill("What is gravity?", params, chat=True, max_new_tokens=40)
    for _ in session.play(params):
        pass
    assert session.finished == "max_tokens" and len(session.generated_ids) == 40
    prompt = torch.tensor([session.prompt_ids])
    with torch.no_grad():
        out = hf.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None,
                          pad_token_id=default_model.tokenizer.eos_id)
    assert out[0, prompt.shape[1]:].tolist() == session.generated_ids
    assert session.text.startswith("Gravity is a fundamental concept in physics")
