"""Speculative decoding: greedy output equals plain greedy decoding, the acceptance rule keeps the full model's
distribution, the caches after a rejection equal caches built by plain decoding, bad input is one line."""

from __future__ import annotations

import pytest
import torch

from inspector.engine import steps
from inspector.engine.config import SamplingParams
from inspector.engine.sampling import sample
from inspector.errors import InputError
from inspector.session.session import Session
from inspector.speculative.decoding import SpeculativeDecoder, plain_decode
from inspector.speculative.drafters import Draft, EarlyExitDrafter, lookup, make_drafter
from inspector.speculative.verify import accept_drafts, accept_token, residual, target_probs
from tests.support.viz_records import tiny_loaded  # noqa: F401

GREEDY = SamplingParams()
PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick brown fox", "def add(a, b):\n    return a + b\n",
           "Hello world! Tokenizers split text"]


def plain_greedy(loaded, ids: list[int], n: int) -> list[int]:
    """The reference: the app's Session, greedy, without a recorder."""
    s = Session(loaded, record=False)
    s.prefill_ids(ids, GREEDY, max_new_tokens=n)
    for _ in s.play(GREEDY):
        pass
    return s.generated_ids


def spec_run(loaded, spec: str, k: int, ids: list[int], n: int, params: SamplingParams = GREEDY) -> SpeculativeDecoder:
    run = SpeculativeDecoder(loaded, make_drafter(spec, loaded.model), k, params, max_new_tokens=n)
    run.prefill(ids)
    for _ in run.play():
        pass
    return run


class FixedDrafter:
    """A drafter that proposes given tokens (the Protocol needs nothing more): forces rejections."""

    name = "fixed"

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def draft(self, context, k, params):
        return Draft(self.ids[:k], None, [1.0] * min(k, len(self.ids)))

    def rollback(self, length):
        pass

    def reset(self):
        pass


# ---- greedy: token for token
@pytest.mark.parametrize("spec", ["ngram", "early-exit:1"])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_equals_plain_greedy_on_a_tiny_model(tiny_loaded, spec, k):  # noqa: F811
    for prompt in PROMPTS:
        ids = tiny_loaded.tokenizer.encode(prompt)
        run = spec_run(tiny_loaded, spec, k, ids, 12)
        assert run.generated_ids == plain_greedy(tiny_loaded, ids, 12)
        assert run.stats.tokens + 1 == len(run.generated_ids)
        assert run.stats.target_forwards == len(run.rounds) and run.stats.drafted >= run.stats.accepted


@pytest.mark.slow
def test_greedy_equals_plain_greedy_on_the_real_model(default_model):
    tok = default_model.tokenizer
    prompts = [
        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n# again:\ndef add(a, b):",
        tok.render_chat("What is gravity?"),
        tok.render_chat("Repeat exactly: the cat sat on the mat, the cat sat on the mat."),
    ]
    for prompt in prompts:
        ids = tok.encode(prompt)
        want = plain_greedy(default_model, ids, 16)
        for spec in ("ngram", "early-exit:24"):
            run = spec_run(default_model, spec, 4, ids, 16)
            assert run.generated_ids == want, (spec, prompt)
    # the code prompt repeats itself: prompt lookup keeps most of its drafts
    code = spec_run(default_model, "ngram", 4, tok.encode(prompts[0]), 16)
    assert code.stats.acceptance_rate > 0.5 and code.stats.tokens_per_forward > 2


def test_generation_stops_where_plain_decoding_stops(tiny_loaded):  # noqa: F811
    ids = tiny_loaded.tokenizer.encode(PROMPTS[0])
    want = plain_greedy(tiny_loaded, ids, 7)
    for k in (1, 4, 9):  # drafts are capped so no round passes max new tokens
        run = spec_run(tiny_loaded, "ngram", k, ids, 7)
        assert run.generated_ids == want and run.finished == "max_tokens"
    run = SpeculativeDecoder(tiny_loaded, FixedDrafter(want[1:4]), 3, GREEDY, max_new_tokens=20)
    run.prefill(ids)
    run.eos_ids = frozenset({want[2]})  # an end-of-sequence token inside the kept drafts
    rec = run.round()
    end = want.index(want[2], 1)  # the first place plain decoding meets that token
    assert run.finished == "eos" and run.generated_ids == want[:end + 1]
    assert rec.emitted == want[1:end + 1] and rec.next_kind == "none" and rec.next_id is None


# ---- the acceptance rule
def test_target_probs_is_the_distribution_sample_draws_from():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    for params in [SamplingParams(0.7, top_k=10), SamplingParams(1.3, top_p=0.8, min_p=0.05), SamplingParams(1.0)]:
        got = target_probs(logits, params)
        for i in range(3):
            assert torch.allclose(got[i], sample(logits[i], params).probs_final, atol=1e-6)
    greedy = target_probs(logits, GREEDY)
    assert torch.equal(greedy.argmax(-1), logits.argmax(-1)) and torch.equal(greedy.sum(-1), torch.ones(3))


def test_accept_then_residual_is_exactly_p():
    """P(out = y) = q(y) min(1, p(y)/q(y)) + P(reject) * residual(y) must equal p(y) for every y."""
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        p, q = torch.rand(8, generator=g) ** 3, torch.rand(8, generator=g) ** 3
        p, q = p / p.sum(), q / q.sum()
        keep = q * torch.minimum(torch.ones(8), p / q)
        out = keep + (1 - keep.sum()) * residual(p, q)
        assert torch.allclose(out, p, atol=1e-6)


@pytest.mark.parametrize("with_q", [True, False])
def test_the_rule_preserves_the_target_distribution_seeded(with_q):
    """20,000 seeded rounds of one draft on a 6-token vocabulary: the output frequencies match p within
    0.015 (about 4 standard deviations of a frequency near 0.3)."""
    p = torch.tensor([0.05, 0.30, 0.10, 0.25, 0.20, 0.10])
    q = torch.tensor([0.40, 0.05, 0.25, 0.10, 0.10, 0.10])
    g = torch.Generator().manual_seed(7)
    counts = torch.zeros(6)
    n = 20_000
    for _ in range(n):
        x = int(torch.multinomial(q, 1, generator=g)) if with_q else 1  # prompt lookup: a fixed proposal
        kept, token = accept_token(x, p, q if with_q else None, g)
        counts[x if kept else token] += 1
    assert (counts / n - p).abs().max() < 0.015


def test_accept_drafts_greedy_keeps_the_prefix_equal_to_the_argmax():
    p = torch.zeros(4, 10)
    p[0, 3] = p[1, 5] = p[2, 7] = p[3, 1] = 1.0  # the full model's argmax at each position
    assert accept_drafts([3, 5, 7], p, None, GREEDY, 10) == accept_drafts([3, 5, 7], p, None, GREEDY, 10)
    v = accept_drafts([3, 5, 7], p, None, GREEDY, 10)
    assert (v.accepted, v.token, v.bonus) == (3, 1, True)
    v = accept_drafts([3, 6, 7], p, None, GREEDY, 10)
    assert (v.accepted, v.token, v.bonus) == (1, 5, False)


def test_sampled_runs_are_reproducible(tiny_loaded):  # noqa: F811
    ids = tiny_loaded.tokenizer.encode(PROMPTS[1])
    params = SamplingParams(temperature=0.9, top_k=20, seed=3)
    a = spec_run(tiny_loaded, "early-exit:1", 3, ids, 15, params)
    b = spec_run(tiny_loaded, "early-exit:1", 3, ids, 15, params)
    assert a.generated_ids == b.generated_ids and len(a.generated_ids) >= 1
    assert a.rounds[0].drafts and all(0 < d.q <= 1 for d in a.rounds[0].drafts)


# ---- caches
def test_caches_after_a_rejection_equal_plain_decode_caches(tiny_loaded):  # noqa: F811
    model = tiny_loaded.model
    ids = tiny_loaded.tokenizer.encode(PROMPTS[0])
    want = plain_greedy(tiny_loaded, ids, 8)
    wrong = (want[2] + 1) % tiny_loaded.config.vocab_size
    run = SpeculativeDecoder(tiny_loaded, FixedDrafter([want[1], wrong, 4, 5]), 4, GREEDY, max_new_tokens=8)
    run.prefill(ids)
    rec = run.round()  # keeps want[1], rejects `wrong`, corrects it to want[2]
    assert (rec.accepted, rec.next_id, rec.next_kind) == (1, want[2], "corrected")
    assert rec.kv_written == len(ids) + 5 and rec.kv_after == len(ids) + 2 == run.cache.lengths[0]
    assert [d.accepted for d in rec.drafts] == [True, False, False, False]
    plain = steps.new_cache(model)
    steps.prefill(model, ids, plain)
    for t in want[:2]:
        steps.decode_step(model, t, plain)
    assert plain.lengths == run.cache.lengths
    for layer in range(tiny_loaded.config.num_hidden_layers):
        for a, b in zip(run.cache.read(layer), plain.read(layer)):
            assert torch.allclose(a, b, atol=1e-5)
    # the early-exit drafter's cache, rolled back with the target's, equals its plain decode too
    drafter = EarlyExitDrafter(model, 1)
    run = SpeculativeDecoder(tiny_loaded, drafter, 4, GREEDY, max_new_tokens=8)
    run.prefill(ids)
    run.round()
    n = drafter.cache.lengths[0]
    assert n <= run.cache.lengths[0]
    ref = steps.new_cache(model)
    with torch.inference_mode():
        model(torch.tensor([(ids + run.generated_ids)[:n]]), ref, n_layers=1)
    ref.advance(n)
    for a, b in zip(drafter.cache.read(0), ref.read(0)):
        assert torch.allclose(a, b, atol=1e-5)
    assert drafter.cache.read(1)[0].numel() == 0  # layers past L are never written


def test_prompt_lookup_finds_the_continuation():
    assert lookup([1, 2, 3, 9, 1, 2, 3], 3) == [9, 1, 2]
    assert lookup([5, 6, 7, 8, 5, 6], 2) == [7, 8]  # the longest n-gram first
    assert lookup([1, 2, 3, 4], 3) == []  # nothing repeats
    assert lookup([4, 1, 2, 1, 2], 5) == [1, 2]  # the match followed by the most tokens


def test_plain_decode_matches_the_session(tiny_loaded):  # noqa: F811
    ids = tiny_loaded.tokenizer.encode(PROMPTS[2])
    out, timing = plain_decode(tiny_loaded.model, ids, 5)
    assert out == plain_greedy(tiny_loaded, ids, 6)[:6] and timing.tokens == 5 and timing.seconds > 0


# ---- bad input
@pytest.mark.parametrize("spec, k, message", [
    ("ngram", 0, "draft length must be >= 1"),
    ("ngram", 300, "draft length 300 is past the context"),
    ("medusa", 3, "unknown drafter 'medusa'"),
    ("early-exit:0", 3, "early-exit layer must be a whole number from 1 to 1 .the model has 2 layers."),
    ("early-exit:2", 3, "early-exit layer must be a whole number from 1 to 1 .the model has 2 layers."),
    ("early-exit:x", 3, "early-exit layer must be a whole number from 1 to 1 .the model has 2 layers., got .x."),
])
def test_bad_input_is_one_line(tiny_loaded, spec, k, message):  # noqa: F811
    with pytest.raises(InputError, match=message) as err:
        run = SpeculativeDecoder(tiny_loaded, make_drafter(spec, tiny_loaded.model), k, GREEDY)
        run.prefill(tiny_loaded.tokenizer.encode("hello"))
    assert "\n" not in str(err.value)
