"""bf16 forwards: short ones attend in fp32 on the CPU (see `UPCAST_MAX_KEY_ELEMENTS` in
`inspector.engine.layers`), long ones in bf16; both agree with fp32 on the same weights as closely as
bf16 weights allow, the recorder sees the scores in the model's dtype, and the default model's greedy tokens
in bf16 equal fp32's."""

from __future__ import annotations

import pytest
import torch

from tests.support.engine_fixtures import tiny_model
from inspector.engine import layers as attention_module
from inspector.engine import steps as engine
from inspector.engine.recording import FullRecorder

PROMPT = [5, 17, 42, 9, 101, 7, 33, 250, 64, 3]


def decode_logits(model, steps: int = 6, rec=None) -> torch.Tensor:
    """(steps + 1, V) fp32 logits: a prefill of PROMPT, then greedy decode steps."""
    cache = engine.new_cache(model)
    rows = [engine.prefill(model, PROMPT, cache)]
    for _ in range(steps):
        rows.append(engine.decode_step(model, int(rows[-1].argmax()), cache, rec))
    return torch.stack(rows)


def test_bf16_decode_attends_in_fp32_and_matches_the_bf16_path_and_fp32(monkeypatch):
    fp32 = tiny_model()
    bf16 = tiny_model().to(torch.bfloat16)
    reference = decode_logits(fp32)
    upcast = decode_logits(bf16)
    monkeypatch.setattr(attention_module, "UPCAST_MAX_KEY_ELEMENTS", 0)  # every forward attends in bf16
    plain = decode_logits(bf16)
    assert not torch.equal(upcast, plain)  # the two paths really differ
    scale = reference.abs().max()
    # fp32 attention is at least as close to fp32 as bf16 attention, and both within bf16 rounding
    assert (upcast - reference).abs().max() <= (plain - reference).abs().max() + 1e-3 * scale
    assert (upcast - reference).abs().max() < 0.05 * scale
    assert torch.equal(upcast.argmax(-1), reference.argmax(-1))


def test_bf16_decode_records_scores_in_bf16_and_a_pattern_that_sums_to_one():
    bf16 = tiny_model().to(torch.bfloat16)
    rec = FullRecorder()
    decode_logits(bf16, steps=1, rec=rec)
    scores, pattern = rec.values["blocks.0.attn.hook_attn_scores"], rec.values["blocks.0.attn.hook_pattern"]
    assert scores.dtype == torch.bfloat16
    assert scores.shape == (1, 4, 1, len(PROMPT) + 1)
    assert torch.allclose(pattern.float().sum(-1), torch.ones(1, 4, 1), atol=1e-5)


@pytest.mark.slow
def test_default_model_bf16_greedy_tokens_equal_fp32(default_model):
    from inspector.models.loader import load_model

    bf16 = load_model(dtype=torch.bfloat16)
    ids = default_model.tokenizer.encode("The capital of France is")
    out = []
    for m in (default_model, bf16):
        cache = engine.new_cache(m.model)
        token, seq = int(engine.prefill(m.model, ids, cache).argmax()), []
        for _ in range(12):
            seq.append(token)
            token = int(engine.decode_step(m.model, token, cache).argmax())
        out.append(seq)
    assert out[0] == out[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_rounds_as_transformers_bit_for_bit(dtype):
    from inspector.engine.layers import RMSNorm

    for dim in (7, 64, 576):
        norm = RMSNorm(dim, 1e-6).to(dtype)
        torch.nn.init.normal_(norm.weight)
        x = (torch.randn(2, 5, dim) * 3).to(dtype)
        x32 = x.float()  # transformers' LlamaRMSNorm: fp32 statistics, rounded to x's dtype before the weight
        want = norm.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
        assert torch.equal(norm(x), want)
