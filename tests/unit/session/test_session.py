"""Session behaviour on a tiny random checkpoint: records, cached == recompute, branching, resampling,
finish reasons, and clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.support.tiny import make_tiny_checkpoint, tiny_llama_dir  # noqa: F401 (fixture)

from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.models.loader import load_model
from inspector.session.session import Session

GREEDY = SamplingParams()
PROMPT = "The quick brown fox jumps over the lazy dog. Attention is all you need"


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):  # noqa: F811
    return load_model(tiny_llama_dir)


def run(session: Session, params: SamplingParams, steps: int, prompt: str = PROMPT) -> Session:
    session.prefill(prompt, params, max_new_tokens=1000)
    for _ in range(steps):
        if session.finished:
            break
        session.step(params)
    return session


def test_records_describe_each_forward(loaded):
    s = run(Session(loaded), GREEDY, 3)
    cfg = loaded.config
    P = len(s.prompt_ids)
    assert P >= 20 and len(s.records) == 4 and len(s.generated_ids) == 4
    pre = s.records[0]
    assert pre.kind == "prefill" and pre.start_pos == 0 and pre.token_ids == s.prompt_ids and pre.cached
    assert pre.resid_pre.shape == (cfg.num_hidden_layers, P) and pre.resid_pre.dtype == np.float32
    assert pre.logits.shape == (cfg.vocab_size,) and pre.logits.dtype == np.float16
    assert pre.tokenize_ms > 0 and pre.forward_ms > 0 and pre.sample_ms > 0
    for k, rec in enumerate(s.records[1:], start=1):
        assert rec.kind == "decode" and rec.step == k and rec.start_pos == P + k - 1
        assert rec.token_ids == [s.generated_ids[k - 1]]
        assert rec.mlp_out.shape == (cfg.num_hidden_layers, 1)
        assert [kv.length for kv in rec.kv] == [P + k] * cfg.num_hidden_layers
        assert rec.sample.token_id == s.generated_ids[k]
    assert s.records[-1].kv[0].nbytes == 2 * cfg.num_key_value_heads * cfg.head_dim * 4 * (P + 3)
    assert s.token_pieces() == loaded.tokenizer.pieces(s.prompt_ids + s.generated_ids)
    assert s.ttft_ms == pytest.approx(pre.tokenize_ms + pre.forward_ms + pre.sample_ms)
    assert len(s.tpot_ms) == 3


def test_cached_equals_recompute_over_30_steps(loaded):
    cached = run(Session(loaded), GREEDY, 30)
    full = run(Session(loaded, recompute=True), GREEDY, 30)
    assert full.generated_ids == cached.generated_ids
    assert [r.cached for r in full.records[1:]] == [False] * 30
    assert all(r.cached for r in cached.records)
    for a, b in zip(cached.trace.forwards, full.trace.forwards):
        assert (a.logits - b.logits).abs().max().item() < 1e-4
    # the recompute-mode records still describe only the new position
    assert full.records[-1].resid_post.shape == cached.records[-1].resid_post.shape
    assert np.allclose(full.records[-1].resid_post, cached.records[-1].resid_post, atol=1e-3)
    diff, ms = cached.recompute_last_step()
    assert diff < 1e-4 and ms > 0


def test_sampled_run_is_reproducible_and_seeded(loaded):
    p = SamplingParams(temperature=1.5, seed=11)
    a = run(Session(loaded), p, 15)
    b = run(Session(loaded), p, 15)
    c = run(Session(loaded), SamplingParams(temperature=1.5, seed=12), 15)
    assert a.generated_ids == b.generated_ids and len(a.generated_ids) > 3
    assert a.generated_ids != c.generated_ids


def test_branch_then_continue_equals_fresh_run_with_that_prefix(loaded):
    s = run(Session(loaded), GREEDY, 10)
    old = list(s.generated_ids)
    forced = next(t for t in range(3, 300) if t != old[4])
    s.branch(4, forced)
    assert s.generated_ids == old[:4] + [forced] and len(s.records) == 5
    assert s.records[4].sample.token_id == forced and s.records[4].extra["forced"]
    assert s.cache.length == len(s.prompt_ids) + 4
    for _ in range(5):
        s.step(GREEDY)
    fresh = Session(loaded)
    fresh.prefill_ids(s.prompt_ids + old[:4] + [forced], GREEDY, max_new_tokens=100)
    for _ in range(4):
        fresh.step(GREEDY)
    assert s.generated_ids[5:] == fresh.generated_ids
    for a, b in zip(s.trace.forwards[5:], fresh.trace.forwards):
        assert (a.logits - b.logits).abs().max().item() < 1e-4
    with pytest.raises(InputError, match="no step 12"):
        s.attention_row(12, 0, 0)


def test_preview_predicts_step_and_resample(loaded):
    s = Session(loaded)
    p = SamplingParams(temperature=2.0, top_k=50, seed=3)
    s.prefill(PROMPT, GREEDY, max_new_tokens=100)
    s.step(p)
    assert s.preview_sample(p).token_id == s.generated_ids[-1]  # the same seed rule as step
    q = SamplingParams(temperature=2.0, seed=4)
    preview = s.preview_sample(q)
    rec = s.resample(q)
    assert rec.sample.token_id == preview.token_id == s.generated_ids[-1]
    assert [c.id for c in rec.sample.candidates] == [c.id for c in preview.candidates]
    # preview of an older step uses that step's logits and position
    older = s.preview_sample(GREEDY, step=0)
    assert older.token_id == int(np.argmax(s.records[0].logits.astype(np.float32)))


def test_text_follows_tokens_through_resample_and_branch(loaded):
    s = run(Session(loaded), SamplingParams(temperature=1.0, seed=1), 12)
    tok = loaded.tokenizer
    def expected():
        return tok.decode([t for t in s.generated_ids if not tok.is_special(t)])
    assert s.text == expected()
    s.branch(3, tok.encode(" fox")[0])
    assert s.text == expected()
    s.resample(SamplingParams(temperature=1.0, seed=99))
    assert s.text == expected()


def test_finish_reasons(loaded, tmp_path):
    s = Session(loaded)
    s.prefill(PROMPT, GREEDY, max_new_tokens=3)
    list(s.play(GREEDY))
    assert s.finished == "max_tokens" and len(s.generated_ids) == 3
    with pytest.raises(InputError, match="finished"):
        s.step(GREEDY)
    s.branch(1, loaded.tokenizer.eos_id)
    assert s.finished == "eos" and len(s.generated_ids) == 2
    assert "<|im_end|>" not in s.text
    small = load_model(make_tiny_checkpoint(tmp_path / "ctx", max_position_embeddings=24))
    s = Session(small)
    s.prefill_ids(list(range(3, 23)), GREEDY, max_new_tokens=100)  # 20 prompt tokens, context 24
    list(s.play(GREEDY))
    assert s.finished == "context_full" and len(s.prompt_ids) + len(s.generated_ids) == 24
    assert s.cache.length <= 24
    with pytest.raises(InputError, match="24 tokens; the context window is 24"):
        s.prefill_ids(list(range(3, 27)), GREEDY)


def test_bad_input_is_one_clear_error(loaded):
    s = Session(loaded)
    with pytest.raises(InputError, match="prefill first"):
        s.step(GREEDY)
    with pytest.raises(InputError, match="prompt is empty"):
        s.prefill("   ", GREEDY)
    with pytest.raises(InputError, match="top-p"):
        s.prefill("hi", SamplingParams(temperature=1.0, top_p=0.0))
    with pytest.raises(InputError, match="max new tokens"):
        s.prefill("hi", GREEDY, max_new_tokens=0)
    with pytest.raises(InputError, match="context window is 256"):
        s.prefill("the fox " * 200, GREEDY)
    s.prefill("hi there", GREEDY)
    with pytest.raises(InputError, match="no step 5"):
        s.branch(5, 3)
    with pytest.raises(InputError, match="outside the vocabulary"):
        s.branch(0, 10**6)
    with pytest.raises(InputError, match="no head"):
        s.attention_row(0, 0, 99)


def test_chat_prompt_uses_template(loaded):
    s = Session(loaded)
    s.prefill("hello", GREEDY, chat=True, system="Be brief.", max_new_tokens=2)
    text = loaded.tokenizer.decode(s.prompt_ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>") and text.endswith("<|im_start|>assistant\n")


def test_record_false_keeps_tokens_and_skips_traces(loaded):
    plain = run(Session(loaded, record=False), GREEDY, 5)
    traced = run(Session(loaded), GREEDY, 5)
    assert plain.generated_ids == traced.generated_ids
    assert plain.records[-1].logit_lens == [] and plain.records[-1].resid_post.shape[1] == 0
    with pytest.raises(InputError, match="not recorded"):
        plain.attention_row(0, 0, 0)


def test_bf16_session_runs(tiny_llama_dir):  # noqa: F811
    s = Session(load_model(tiny_llama_dir, dtype=torch.bfloat16))
    run(s, GREEDY, 3)
    cfg, n = s.config, len(s.prompt_ids) + 3
    keys, values = s.cache.read(0)
    assert keys.dtype == values.dtype == torch.bfloat16
    assert s.records[-1].kv[0].nbytes == 2 * cfg.num_key_value_heads * cfg.head_dim * 2 * n  # K and V, 2 bytes each
    assert abs(s.attention_row(3, 1, 2).sum() - 1) < 1e-5


def test_engine_steps_alone_match_session(loaded):
    from inspector.engine import steps as engine

    s = run(Session(loaded, record=False), GREEDY, 7)
    for use_cache in (True, False):  # a greedy loop over the engine's pieces, without the session
        ids, cache = list(s.prompt_ids), engine.new_cache(loaded.model)
        logits = engine.prefill(loaded.model, ids, cache)
        ids.append(int(logits.argmax()))
        for _ in range(7):
            if use_cache:
                logits = engine.decode_step(loaded.model, ids[-1], cache)
            else:
                logits, _ = engine.recompute_step(loaded.model, ids)
            ids.append(int(logits.argmax()))
        assert ids[len(s.prompt_ids):] == s.generated_ids


def test_records_are_small_and_deep_copyable(loaded):
    import copy

    s = run(Session(loaded, lens=True), GREEDY, 2)
    records = copy.deepcopy(s.records)
    def no_tensors(obj):
        if isinstance(obj, torch.Tensor):
            return False
        if isinstance(obj, (list, tuple)):
            return all(no_tensors(x) for x in obj)
        if hasattr(obj, "__dict__"):
            return all(no_tensors(x) for x in vars(obj).values())
        return True
    assert all(no_tensors(r) for r in records)
    assert records[1].logit_lens[0][0].id == s.records[1].logit_lens[0][0].id


def test_sampling_params_are_checked_once(loaded, monkeypatch):
    """A direct caller's params are checked at the prefill (a bad one refused in one line), then not again for the
    same object; params the request already checked (`checked=True`) are not checked here at all."""
    calls = []
    validate = SamplingParams.validate
    monkeypatch.setattr(SamplingParams, "validate", lambda self: (calls.append(self), validate(self))[1])
    s = Session(loaded)
    with pytest.raises(InputError, match="temperature"):
        s.prefill_ids([1, 2, 3], SamplingParams(temperature=-1.0))
    params = SamplingParams(temperature=0.5, seed=3)
    s.prefill_ids([1, 2, 3], params)
    s.step(params)
    s.step(params)
    s.resample(params)
    assert len(calls) == 2  # the refused params, then `params` once
    s.step(SamplingParams(temperature=0.5, seed=3))  # an equal but new object: checked
    assert len(calls) == 3
    trusted = SamplingParams(top_k=4)
    Session(loaded).prefill_ids([1, 2, 3], trusted, checked=True)
    assert len(calls) == 3
