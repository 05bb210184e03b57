"""`run.logits(k)` and greedy `run.generated_ids` equal `transformers` on the same weights: tiny checkpoints of
three families (fast), the default model and Gemma 3 270M (slow). Forward k's logits are transformers'
logits at position len(prompt) + k - 1 of the whole sequence (the position whose next token forward k drew)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.support.tiny import make_tiny_checkpoint

import inspector

TINY = {
    "llama": {},
    "qwen2": dict(tie=False),
    "gemma3_text": dict(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, pad_token_id=0,
                        layer_types=["sliding_attention", "full_attention"]),
}


def hf_model(directory):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                             attn_implementation="eager").eval()


def check(model: inspector.Model, hf, prompt: str, chat: bool, tokens: int, tol: float) -> inspector.Run:
    run = model.prefill(prompt, chat=chat, max_new_tokens=tokens)
    list(run.play())
    n = len(run.prompt_ids)
    ids = torch.tensor([run.prompt_ids + run.generated_ids])
    with torch.no_grad():
        expected = hf(ids).logits[0].numpy()  # (positions, vocab)
        greedy = hf.generate(torch.tensor([run.prompt_ids]), max_new_tokens=tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, n:].tolist()
    for k in range(run.num_forwards):
        got, want = run.logits(k), expected[n + k - 1]
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max()), (k, np.abs(got - want).max())
    assert run.generated_ids == greedy[:len(run.generated_ids)]
    return run


@pytest.mark.parametrize("family", list(TINY))
def test_tiny_models_equal_transformers(family, tmp_path):
    overrides = dict(TINY[family])
    tie = overrides.pop("tie", True)
    directory = make_tiny_checkpoint(tmp_path / family, model_type=family, tie=tie, **overrides)
    model = inspector.load(directory)
    run = check(model, hf_model(directory), "The quick brown fox jumps over the lazy dog.", False, 12, 1e-5)
    assert run.finished in ("max_tokens", "eos")


@pytest.mark.slow
def test_default_model_equals_transformers():
    model = inspector.load()
    run = check(model, hf_model(model.loaded.weights_path), "What is gravity?", True, 24, 1e-4)
    assert run.finished == "max_tokens" and run.text.startswith("Gravity is")


@pytest.mark.slow
def test_gemma3_270m_equals_transformers():
    model = inspector.load("gemma3-270m")
    assert model.config.model_type == "gemma3_text"
    run = check(model, hf_model(model.loaded.weights_path), "def fibonacci(n):", False, 16, 1e-4)
    # the contract's accessors and every view on Gemma's block (post-norms, local and global layers)
    assert run.residual_norms(0).shape == (19, len(run.prompt_ids))
    assert run.attention(5, step=3).shape == (4, 1, len(run.prompt_ids) + 3)
    for view in ("residual", "attention", "kv", "kv_growth", "sampling", "timing"):
        assert run.figure(view, step=2, layer=5).data, view
    assert "post-norm" in run.figure("residual").layout.title.text


def test_bf16_runs_give_float32_logits(tmp_path):
    directory = make_tiny_checkpoint(tmp_path / "m")
    run = inspector.load(directory, dtype="bf16").prefill("The quick brown fox", max_new_tokens=3)
    assert run.model.dtype == "bfloat16" and run.logits(0).dtype == np.float32
    assert int(run.logits(0).argmax()) == run.generated_ids[0]
