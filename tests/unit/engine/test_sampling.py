"""Sampling stages against distributions worked out by hand; purity; greedy; seeds."""

from __future__ import annotations

import math

import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.engine.processors import MinP, TopK, TopP
from inspector.engine.sampling import entropy, generator_for, sample
from inspector.session.sample_records import sample_record

# probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 as logits
PROBS = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625])
LOGITS = PROBS.log()


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """What the top-k stage keeps (its finite logits)."""
    return torch.isfinite(TopK(k)([], logits))


def apply_top_p(probs: torch.Tensor, p: float) -> torch.Tensor:
    return torch.isfinite(TopP(p)([], probs.log()))


def apply_min_p(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    return torch.isfinite(MinP(min_p)([], probs.log()))


def close(a: torch.Tensor, b) -> bool:
    return torch.allclose(a, torch.as_tensor(b, dtype=torch.float32), atol=1e-6)


def test_raw_probs_and_entropy():
    r = sample(LOGITS, SamplingParams(temperature=1.0), generator_for(0, 0))
    assert close(r.probs_raw, PROBS)
    expected = -sum(p * math.log(p) for p in PROBS.tolist())
    assert r.entropy_raw == pytest.approx(expected, abs=1e-6)
    assert r.entropy_final == pytest.approx(expected, abs=1e-6) and r.survivors == 5


def test_temperature_by_hand():
    # T = 0.5 squares the probabilities, then renormalises: p^2 / sum(p^2)
    r = sample(LOGITS, SamplingParams(temperature=0.5), generator_for(0, 0))
    sq = PROBS**2
    assert close(r.probs_temperature, sq / sq.sum())
    assert close(r.probs_final, sq / sq.sum())
    # T = 2: sqrt(p) / sum(sqrt(p))
    r = sample(LOGITS, SamplingParams(temperature=2.0), generator_for(0, 0))
    rt = PROBS.sqrt()
    assert close(r.probs_final, rt / rt.sum())


def test_top_k_by_hand():
    r = sample(LOGITS, SamplingParams(temperature=1.0, top_k=2), generator_for(0, 0))
    assert r.kept_top_k.tolist() == [True, True, False, False, False]
    assert close(r.probs_final, [2 / 3, 1 / 3, 0, 0, 0])
    assert r.survivors == 2 and r.token in (0, 1)
    assert apply_top_k(LOGITS, 0).all() and apply_top_k(LOGITS, 99).all()


def test_top_p_by_hand():
    # top-p 0.7: 0.5 < 0.7 so the second token (0.25) is needed; 0.75 >= 0.7 so the third is not.
    r = sample(LOGITS, SamplingParams(temperature=1.0, top_p=0.7), generator_for(0, 0))
    assert r.kept_top_p.tolist() == [True, True, False, False, False]
    assert close(r.probs_final, [2 / 3, 1 / 3, 0, 0, 0])
    # exactly 0.75 is reached with three tokens... and 0.5 with just the first
    assert apply_top_p(PROBS, 0.5).tolist() == [True, False, False, False, False]
    assert apply_top_p(PROBS, 0.76).tolist() == [True, True, True, False, False]
    # a tiny p still keeps the most likely token
    assert apply_top_p(PROBS, 1e-6).tolist() == [True, False, False, False, False]


def test_min_p_by_hand():
    # min-p 0.2 x top prob 0.5 = 0.1: keeps 0.5, 0.25, 0.125
    assert apply_min_p(PROBS, 0.2).tolist() == [True, True, True, False, False]
    r = sample(LOGITS, SamplingParams(temperature=1.0, min_p=0.2), generator_for(0, 0))
    assert close(r.probs_final, [4 / 7, 2 / 7, 1 / 7, 0, 0])
    assert r.survivors == 3


def test_stages_chain_in_order():
    # top-k 3 -> (4/7, 2/7, 1/7); top-p 0.8 on that: 4/7=0.571 < 0.8, 6/7 >= 0.8 -> two kept;
    # min-p 0.6 on (2/3, 1/3): 1/3 < 0.4 -> one kept.
    r = sample(LOGITS, SamplingParams(temperature=1.0, top_k=3, top_p=0.8, min_p=0.6), generator_for(0, 0))
    assert r.kept_top_k.tolist() == [True, True, True, False, False]
    assert r.kept_top_p.tolist() == [True, True, False, False, False]
    assert r.kept_min_p.tolist() == [True, False, False, False, False]
    assert r.token == 0 and r.survivors == 1 and r.entropy_final == 0.0


def test_greedy_is_argmax_and_ignores_filters():
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    r = sample(logits, SamplingParams(temperature=0.0, top_k=1, top_p=0.1))
    assert r.token == 1 and r.survivors == 1
    assert r.probs_final.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert close(r.probs_temperature, torch.softmax(logits, -1))
    assert r.kept_top_k.all()


def test_input_never_modified():
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    for params in (SamplingParams(temperature=0.7, top_k=5, top_p=0.5, min_p=0.1), SamplingParams()):
        r = sample(logits, params, generator_for(3, 9))
        assert torch.equal(logits, before)
        r.probs_raw.zero_()  # results are not aliased to the input either
        assert torch.equal(logits, before)


def test_seeds_reproduce_and_differ():
    logits = torch.zeros(1000)  # uniform: different generators almost surely draw different tokens
    p = SamplingParams(temperature=1.0, seed=7)
    draws = [sample(logits, p, generator_for(7, pos)).token for pos in range(20)]
    again = [sample(logits, p, generator_for(7, pos)).token for pos in range(20)]
    other = [sample(logits, p, generator_for(8, pos)).token for pos in range(20)]
    assert draws == again
    assert draws != other
    assert len(set(draws)) > 10


def test_draw_frequencies_follow_the_final_distribution():
    p = SamplingParams(temperature=1.0, top_k=3)
    counts = torch.zeros(5)
    for pos in range(3000):
        counts[sample(LOGITS, p, generator_for(1, pos)).token] += 1
    freq = counts / counts.sum()
    assert counts[3:].sum() == 0
    assert torch.allclose(freq[:3], torch.tensor([4 / 7, 2 / 7, 1 / 7]), atol=0.03)


def test_forced_token_and_record():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    p = SamplingParams(temperature=1.0, top_k=2)
    r = sample(logits, p, generator_for(0, 0), force_token=3)
    assert r.token == 3
    rec = sample_record(r, logits, p, piece=lambda i: f"t{i}", n=2)
    assert [c.id for c in rec.candidates] == [0, 1, 3]  # top-2 plus the chosen token
    assert rec.token_piece == "t3" and rec.vocab_size == 4
    c0 = rec.candidates[0]
    assert c0.prob_raw == pytest.approx(float(torch.softmax(logits, -1)[0]))
    assert c0.kept_top_k and not rec.candidates[2].kept_top_k and rec.candidates[2].prob_final == 0.0
    assert entropy(torch.tensor([0.5, 0.5, 0.0])) == pytest.approx(math.log(2))


def test_a_greedy_record_deferred_until_read_equals_the_one_built_at_once():
    """A greedy draw without processors gives a deferred record (token now, the rest when read): every field,
    read later, equals what a record built at once holds; a copy or pickle carries the built fields."""
    import copy
    import dataclasses
    import pickle

    from inspector.session import sample_records

    torch.manual_seed(0)
    logits = torch.randn(300) * 3
    params = SamplingParams()
    piece = str
    deferred = sample_record(sample(logits, params), logits, params, piece)
    assert "_fill" in deferred.__dict__ and deferred.token_id == int(logits.argmax())  # nothing built yet
    built = sample_records._built(sample(logits, params), logits, params, piece, 20, None)
    assert "_fill" not in built.__dict__
    assert pickle.loads(pickle.dumps(deferred)) == built and "_fill" not in deferred.__dict__  # filled to pickle
    later = sample_record(sample(logits, params), logits, params, piece)
    assert copy.deepcopy(later) == built and "_fill" not in copy.deepcopy(later).__dict__
    for f in dataclasses.fields(built):
        assert getattr(deferred, f.name) == getattr(built, f.name), f.name
    assert deferred.entropy_raw == pytest.approx(entropy(torch.softmax(logits, -1)))
    assert deferred.survivors == 1 and deferred.candidates[0].prob_final == 1.0
    with pytest.raises(AttributeError):
        deferred.no_such_field


def test_a_result_computes_each_distribution_when_read_and_keeps_it():
    logits = LOGITS.clone()
    r = sample(logits, SamplingParams(temperature=0.7, top_k=3, seed=1), generator_for(1, 0))
    assert r.probs_raw is r.probs_raw  # computed once, then kept
    assert close(r.probs_raw, PROBS) and torch.equal(logits, LOGITS)
    assert r.kept_top_k.tolist() == [True, True, True, False, False] and r.survivors == 3
    assert r.stage_names == [name for name, _ in r.stages]
