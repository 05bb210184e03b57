"""The trace store on a tiny random checkpoint: one `Forward` per forward kept in step with the KV cache,
attention views equal to a softmax worked out here from an uncached forward's queries and keys, and
retained bytes equal to the tensors and arrays actually held."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.engine.config import SamplingParams
from inspector.engine.recording import FullRecorder
from inspector.errors import InputError
from inspector.models.loader import load_model
from inspector.session.session import Session
from inspector.session.trace_store import Forward

GREEDY = SamplingParams()
PROMPT = "The quick brown fox jumps over the lazy dog"
STEPS = 4


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):  # noqa: F811
    return load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def session(loaded) -> Session:
    s = Session(loaded)
    s.prefill(PROMPT, GREEDY, max_new_tokens=100)
    for _ in range(STEPS):
        s.step(GREEDY)
    return s


def expected_weights(s: Session, layer: int) -> torch.Tensor:
    """(H, S, S) causal softmax of one layer over the whole sequence fed so far, from an uncached forward."""
    rec = FullRecorder()
    ids = s.prompt_ids + s.generated_ids[:STEPS]
    with torch.inference_mode():
        s.model(torch.tensor([ids]), rec=rec)
    q = rec.values[f"blocks.{layer}.attn.hook_rot_q"][0].double()  # (H, S, d)
    k = rec.values[f"blocks.{layer}.attn.hook_rot_k"][0].double()  # (KV, S, d)
    k = k.repeat_interleave(s.config.n_rep, dim=0)  # (H, S, d): query head h reads KV head h // n_rep
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # (H, S, S)
    S = scores.shape[-1]
    future = torch.ones(S, S, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def test_one_forward_per_step_kept_in_step_with_the_cache(session, loaded):
    cfg, trace = loaded.config, session.trace
    assert len(trace.forwards) == len(session.records) == STEPS + 1
    P = len(session.prompt_ids)
    for k, forward in enumerate(trace.forwards):
        rec = forward.record
        assert isinstance(forward, Forward) and session.records[k] is rec and rec.step == k
        n_new = P if k == 0 else 1
        assert forward.logits.shape == (cfg.vocab_size,) and forward.logits.dtype == torch.float32
        np.testing.assert_allclose(rec.logits, forward.logits.numpy().astype(np.float16))
        assert forward.queries.shape == (cfg.num_hidden_layers, cfg.num_attention_heads, n_new, cfg.head_dim)
        assert forward.lens_inputs.shape == (cfg.num_hidden_layers, cfg.hidden_size)
    assert trace.end == session.cache.length == P + STEPS and trace.pending is None


def test_pending_and_truncate_rewind_the_cache(loaded):
    s = Session(loaded, lens=False)
    s.prefill(PROMPT, GREEDY, max_new_tokens=100)
    for _ in range(3):
        s.step(GREEDY)
    trace = s.trace
    s.forward_ahead()
    assert trace.pending is not None and len(trace.forwards) == 4
    assert s.cache.length == trace.end + 1  # the pending forward's position, in no record
    trace.drop_pending()
    assert trace.pending is None and s.cache.length == trace.end
    s.forward_ahead()
    trace.truncate(1)
    assert len(trace.forwards) == 2 and trace.pending is None
    assert s.cache.length == trace.end == len(s.prompt_ids) + 1
    with pytest.raises(InputError, match="no step 2"):
        trace.at(2)


def test_attention_views_equal_a_softmax_worked_out_here(session, loaded):
    cfg = loaded.config
    P = len(session.prompt_ids)
    for layer in range(cfg.num_hidden_layers):
        want = expected_weights(session, layer).numpy()  # (H, S, S)
        for head in range(cfg.num_attention_heads):
            pattern = session.trace.attention_pattern(0, layer, head)  # the prefill: (P, P)
            np.testing.assert_allclose(pattern, want[head, :P, :P], atol=1e-5)
            for step in range(1, STEPS + 1):  # decode step k feeds position P + k - 1
                pos = P + step - 1
                row = session.trace.attention_row(step, layer, head)
                np.testing.assert_allclose(row, want[head, pos, : pos + 1], atol=1e-5)
            row = session.trace.attention_row(0, layer, head, query_index=3)
            np.testing.assert_allclose(row, want[head, 3, :4], atol=1e-5)
    for step, query_index, pos in ((0, 5, 5), (0, -1, P - 1), (STEPS, -1, P + STEPS - 1)):
        over = session.trace.attention_overview(step, query_index)
        assert over.shape == (cfg.num_hidden_layers, cfg.num_attention_heads, pos + 1)
        for layer in range(cfg.num_hidden_layers):
            np.testing.assert_allclose(over[layer], expected_weights(session, layer)[:, pos, : pos + 1], atol=1e-5)


def test_retained_bytes_are_the_tensors_and_arrays_held(loaded):
    def held_nbytes(obj) -> int:
        """Bytes of every tensor and numpy array among an object's attributes, and inside its dataclasses."""
        total = 0
        for value in vars(obj).values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
            elif isinstance(value, np.ndarray):
                total += value.nbytes
            elif hasattr(value, "__dataclass_fields__"):
                total += held_nbytes(value)
        return total

    s = Session(loaded)
    s.prefill(PROMPT, GREEDY, max_new_tokens=100)
    s.step(GREEDY)
    s.forward_ahead()
    trace = s.trace
    forwards = trace.forwards + [trace.pending]
    assert trace.retained_nbytes == s.cache.allocated_nbytes + sum(held_nbytes(f) for f in forwards)
    assert s.retained_nbytes == trace.retained_nbytes


def test_lens_is_computed_once_into_the_record(loaded):
    s = Session(loaded, lens=False)
    s.prefill(PROMPT, GREEDY, max_new_tokens=100)
    assert s.records[0].logit_lens == []
    lens = s.trace.logit_lens(0)
    assert s.records[0].logit_lens is lens and s.trace.logit_lens(0) is lens
    assert len(lens) == loaded.config.num_hidden_layers
    assert [t.id for t in lens[-1]] == torch.topk(s.trace.at(0).logits, 5).indices.tolist()
