"""Running a decode forward ahead (`Session.forward_ahead`) changes nothing a session shows or returns:
the same tokens, records, logits, attention and KV cache as stepping without it, also after a resample or
a branch replaced the token the pending forward had fed."""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.engine.config import SamplingParams
from inspector.models.loader import load_model
from inspector.session.session import Session

PROMPT = "The quick brown fox jumps over the lazy dog"
SAMPLED = SamplingParams(temperature=1.3, top_k=0, top_p=1.0, seed=7)  # a random draw, not greedy


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):  # noqa: F811
    return load_model(tiny_llama_dir)


def started(loaded, params=SAMPLED) -> Session:
    s = Session(loaded, lens=False)  # as the app: the lens only when asked for
    s.prefill(PROMPT, params, max_new_tokens=1000)
    return s


def assert_same(a: Session, b: Session) -> None:
    assert a.generated_ids == b.generated_ids and a.text == b.text
    assert a.cache.length == b.cache.length
    assert len(a.records) == len(b.records)
    for ra, rb in zip(a.records, b.records):
        assert (ra.kind, ra.step, ra.start_pos, ra.token_ids) == (rb.kind, rb.step, rb.start_pos, rb.token_ids)
        assert [kv.length for kv in ra.kv] == [kv.length for kv in rb.kv]
        np.testing.assert_array_equal(ra.logits, rb.logits)
        np.testing.assert_array_equal(ra.resid_post, rb.resid_post)
        assert ra.sample.token_id == rb.sample.token_id
    last = len(a.records) - 1
    np.testing.assert_array_equal(a.attention_overview(last), b.attention_overview(last))
    for layer in range(a.config.num_hidden_layers):
        for ta, tb in zip(a.cache.read(layer), b.cache.read(layer)):  # keys, then values
            np.testing.assert_array_equal(ta, tb)


def test_steps_run_ahead_equal_plain_steps(loaded):
    plain, ahead = started(loaded), started(loaded)
    for k in range(1, 7):
        assert ahead.forward_ahead(lens=k % 2 == 0) and ahead.is_ahead
        # the pending forward has written one position but shows nothing yet
        assert len(ahead.records) == len(plain.records) and ahead.cache.length == plain.cache.length + 1
        plain.step(SAMPLED)
        ahead.step(SAMPLED)
        assert not ahead.is_ahead
        assert_same(plain, ahead)
        assert bool(ahead.records[k].logit_lens) is (k % 2 == 0)  # the lens ran ahead when asked
        assert ahead.logit_lens(k) == plain.logit_lens(k)


def test_the_attention_overview_runs_ahead_and_equals_one_computed_after(loaded):
    """`overview=True` computes the pending forward's every-head attention row; the step that commits it
    returns those rows, equal to a session's that stepped without running ahead; once another forward runs,
    they are computed again (from the cache they were read from)."""
    plain, ahead = started(loaded), started(loaded)
    for s in (plain, ahead):
        s.step(SAMPLED)
    assert ahead.forward_ahead(overview=True)
    kept = ahead.trace.overview_ahead
    assert kept is not None and kept[0] is ahead.trace.pending
    assert ahead.retained_nbytes >= ahead.trace.pending.nbytes + kept[1].nbytes  # held, so counted
    for s in (plain, ahead):
        s.step(SAMPLED)
    last = len(ahead.records) - 1
    assert ahead.attention_overview(last) is kept[1]  # the rows that ran ahead
    np.testing.assert_array_equal(kept[1], plain.attention_overview(last))
    ahead.forward_ahead()  # a newer forward pending: computed again
    again = ahead.attention_overview(last)
    assert again is not kept[1]
    np.testing.assert_array_equal(again, plain.attention_overview(last))


def test_resample_and_branch_drop_the_pending_forward(loaded):
    other = SamplingParams(temperature=2.0, top_k=0, top_p=1.0, seed=99)
    plain, ahead = started(loaded), started(loaded)
    for s in (plain, ahead):
        s.step(SAMPLED)
    ahead.forward_ahead()
    for s in (plain, ahead):
        s.resample(other)
    assert not ahead.is_ahead and ahead.cache.length == plain.cache.length
    for s in (plain, ahead):
        s.step(SAMPLED)
    assert_same(plain, ahead)

    forced = (plain.generated_ids[1] + 1) % loaded.config.vocab_size
    ahead.forward_ahead()
    for s in (plain, ahead):
        s.branch(1, forced)
    assert not ahead.is_ahead and ahead.generated_ids[-1] == forced
    ahead.forward_ahead()
    for s in (plain, ahead):
        s.step(SAMPLED)
    assert_same(plain, ahead)


def test_nothing_to_run_ahead(loaded):
    assert not Session(loaded).forward_ahead()  # not prefilled
    s = started(loaded)
    assert s.forward_ahead() and s.is_ahead
    pending = s.retained_nbytes
    assert s.forward_ahead() and s.retained_nbytes == pending  # one pending forward at most
    recompute = Session(loaded, recompute=True)
    recompute.prefill(PROMPT, SAMPLED)
    assert not recompute.forward_ahead()
    done = Session(loaded)
    done.prefill(PROMPT, SAMPLED, max_new_tokens=1)
    assert done.finished == "max_tokens" and not done.forward_ahead()


def test_pending_forward_counts_in_retained_bytes(loaded):
    s = started(loaded)
    before = s.retained_nbytes
    s.forward_ahead()
    assert s.retained_nbytes >= before + s.config.vocab_size * 4  # at least its fp32 logits
    s.prefill(PROMPT, SAMPLED)  # a new run forgets it
    assert not s.is_ahead
