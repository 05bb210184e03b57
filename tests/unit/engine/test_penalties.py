"""The penalty, bias and ban processors against `transformers`' processors of the same name: the same logits
(vocab-sized, several seeds) and ids give bit-identical outputs; presence/frequency against the OpenAI
formula written out per token."""

from __future__ import annotations

import pytest
import torch

from inspector.engine.penalties import (BadWords, FrequencyPenalty, LogitBias, MinNewTokens, NoRepeatNGram,
                                        PresencePenalty, RepetitionPenalty)

lp = pytest.importorskip("transformers.generation.logits_process")

V = 49152
SEEDS = (0, 1, 2, 3)


def case(seed: int, n_ids: int = 40, vocab_span: int = 60) -> tuple[list[int], torch.Tensor]:
    """Ids drawn from a small range (so they repeat and n-grams recur) and vocab-sized logits of both signs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_span, (n_ids,), generator=g).tolist()
    logits = torch.randn(V, generator=g) * 4
    return ids, logits


def hf(proc, ids: list[int], logits: torch.Tensor) -> torch.Tensor:
    return proc(torch.tensor([ids]), logits.clone()[None])[0]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("penalty", [1.3, 0.7, 2.0])
def test_repetition_penalty_is_transformers(seed, penalty):
    ids, logits = case(seed)
    before = logits.clone()
    out = RepetitionPenalty(penalty)(ids, logits)
    assert same_bits(out, hf(lp.RepetitionPenaltyLogitsProcessor(penalty), ids, logits))
    assert torch.equal(logits, before)  # the input is not edited
    assert not torch.equal(out, logits)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_no_repeat_ngram_is_transformers(seed, size):
    ids, logits = case(seed, vocab_span=6 if size > 2 else 60)
    ids = ids + ids[:size - 1]  # the newest n-1 ids occurred before: their successor there is banned
    out = NoRepeatNGram(size)(ids, logits)
    assert same_bits(out, hf(lp.NoRepeatNGramLogitsProcessor(size), ids, logits))
    assert torch.isinf(out).any()


@pytest.mark.parametrize("seed", SEEDS)
def test_bad_words_is_transformers(seed):
    ids, logits = case(seed, vocab_span=8)
    words = [[5], [ids[-1], 7], [ids[-2], ids[-1], 9], [3, 4, 11], [2]]  # two prefixes match the end of ids
    eos = 2
    out = BadWords(tuple(tuple(w) for w in words), eos_ids=(eos,))(ids, logits)
    ref = hf(lp.NoBadWordsLogitsProcessor(words, eos_token_id=eos), ids, logits)
    assert same_bits(out, ref)
    assert torch.isinf(out[[5, 7, 9]]).all() and torch.isfinite(out[eos])


@pytest.mark.parametrize("seed", SEEDS)
def test_logit_bias_is_transformers_sequence_bias(seed):
    ids, logits = case(seed)
    bias = ((10, 5.0), (20, -3.5), (V - 1, 100.0))
    out = LogitBias(bias)(ids, logits)
    ref = hf(lp.SequenceBiasLogitsProcessor([[[t], b] for t, b in bias]), ids, logits)
    assert same_bits(out, ref)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("min_new", [0, 5, 30])
def test_min_new_tokens_is_transformers(seed, min_new):
    ids, logits = case(seed)
    prompt_len, eos = 20, (0, 7)
    out = MinNewTokens(min_new, prompt_len, eos)(ids, logits)
    assert same_bits(out, hf(lp.MinNewTokensLengthLogitsProcessor(prompt_len, min_new, list(eos)), ids, logits))
    assert torch.isinf(out[list(eos)]).all() == (len(ids) - prompt_len < min_new)


@pytest.mark.parametrize("seed", SEEDS)
def test_presence_and_frequency_follow_the_openai_rule(seed):
    ids, logits = case(seed)
    prompt_len = 15
    gen = ids[prompt_len:]
    pres = PresencePenalty(0.8, prompt_len)(ids, logits)
    freq = FrequencyPenalty(0.3, prompt_len)(ids, logits)
    for t in set(ids) | {999}:
        c = gen.count(t)
        assert float(pres[t]) == pytest.approx(float(logits[t]) - 0.8 * (c > 0), abs=1e-6)
        assert float(freq[t]) == pytest.approx(float(logits[t]) - 0.3 * c, abs=1e-6)
    only_prompt = set(ids[:prompt_len]) - set(gen)
    assert all(float(pres[t]) == float(logits[t]) for t in only_prompt)  # the prompt is not penalised


def test_processors_are_pure_functions_of_ids():
    ids, logits = case(0)
    for proc in (RepetitionPenalty(1.3), NoRepeatNGram(2), PresencePenalty(1.0, 10), FrequencyPenalty(1.0, 10)):
        a = proc(ids, logits)
        proc(ids + [1, 2, 3], logits)
        assert torch.equal(proc(ids, logits), a)
