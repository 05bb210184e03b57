"""The generation loop's three levers, each against an independent reference (transformers on the same
weights, its own processor, mask or forward hook making the same change), each shown to change the output,
and cached decoding equal to full recomputation under each intervention."""

from __future__ import annotations

import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.engine.steps import new_cache
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.levers import Hooks, Intervention, KeepAll, Levers, SlidingWindow, check_interventions
from inspector.generation.sequence import FinishReason, Sequence
from tests.support.engine_fixtures import hf_pair
from tests.support.generation import GREEDY, PROMPT, generate, hf_greedy


@pytest.fixture(scope="module")
def pair():
    hf, ours, cfg = hf_pair("llama", layout="decode")
    return hf, ours, cfg


# ---- no levers: the default changes nothing
def test_default_levers_change_nothing(pair):
    _, ours, _ = pair
    plain, plain_logits = generate(ours, PROMPT, 12)
    levered, levered_logits = generate(ours, PROMPT, 12, Levers(processors=(), cache_policy=KeepAll()))
    assert plain == levered and all(torch.equal(a, b) for a, b in zip(plain_logits, levered_logits))


# ---- 1. logits processors
class Suppress:
    """Sets the logits of some tokens to -inf (transformers' SuppressTokensLogitsProcessor)."""

    name = "suppress"

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, ids, logits):
        out = logits.clone()
        out[..., self.ids] = float("-inf")
        return out


def test_a_processor_changes_greedy_output_as_transformers_does(pair):
    hf, ours, _ = pair
    plain, _ = generate(ours, PROMPT, 16)
    banned = sorted(set(plain[:4]))
    levers = Levers(processors=(Suppress(banned),))
    ours_ids, _ = generate(ours, PROMPT, 16, levers)
    assert ours_ids != plain and not set(banned) & set(ours_ids)
    assert ours_ids == hf_greedy(hf, PROMPT, 16, suppress_tokens=banned)


def test_processor_stage_is_recorded_before_the_sampling_stages(pair):
    _, ours, _ = pair
    seq = Sequence(PROMPT, 4, 256)
    logits = loop.forward(ours, new_cache(ours), [PROMPT])[0]
    banned = int(logits.argmax())
    result = loop.choose(seq, logits, SamplingParams(temperature=0.7, top_k=5, seed=3),
                         Levers(processors=(Suppress([banned]),)))
    assert [name for name, _ in result.stages] == ["suppress", "temperature", "top-k", "top-p", "min-p"]
    assert float(result.stages[0][1][banned]) == 0.0 and float(result.probs_final[banned]) == 0.0
    assert result.token != banned


# ---- 2. KV-cache policy
def test_window_at_least_the_sequence_changes_nothing(pair):
    _, ours, _ = pair
    plain, plain_logits = generate(ours, PROMPT, 20)
    big = len(PROMPT) + 20
    for policy in (SlidingWindow(big), SlidingWindow(big - 4, sinks=4)):
        ids, logits = generate(ours, PROMPT, 20, Levers(cache_policy=policy))
        assert ids == plain and all(torch.equal(a, b) for a, b in zip(plain_logits, logits))


@pytest.mark.parametrize("window,sinks", [(4, 0), (4, 2)])
def test_sliding_window_equals_transformers_with_the_same_mask(pair, window, sinks):
    """Each decode position p attends to the sinks and positions p - window .. p (the cache keeps the newest
    `window` after each forward, then p is added); the prompt was read with full causal attention in its
    prefill. transformers computes the whole sequence at once with that 4-D mask."""
    hf, ours, _ = pair
    n = 12
    ids, logits = generate(ours, PROMPT, n, Levers(cache_policy=SlidingWindow(window, sinks)))
    plain, _ = generate(ours, PROMPT, n)
    assert ids != plain  # the window changed what the model said
    full = PROMPT + ids[:-1]
    T, P = len(full), len(PROMPT)
    allowed = torch.ones(T, T).tril().bool()
    for p in range(P, T):
        row = torch.zeros(T, dtype=torch.bool)
        row[:sinks] = True
        row[max(p - window, 0):p + 1] = True
        allowed[p] = row & allowed[p]
    mask = torch.zeros(1, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        ref = hf(torch.tensor([full]), attention_mask=mask).logits[0]  # (T, V)
    for k, lg in enumerate(logits):
        assert torch.allclose(lg, ref[P - 1 + k], atol=1e-4), k


def test_eviction_bookkeeping_keeps_absolute_positions(pair):
    _, ours, cfg = pair
    cache = new_cache(ours)
    levers = Levers(cache_policy=SlidingWindow(3, sinks=1))
    loop.forward(ours, cache, [PROMPT], levers)
    held = cache.held_positions(0).tolist()
    assert held == [0, len(PROMPT) - 3, len(PROMPT) - 2, len(PROMPT) - 1]
    assert cache.kept_nbytes == 4 * cache.bytes_per_position and cache.nbytes == len(PROMPT) * cache.bytes_per_position
    cache.truncate(len(PROMPT) - 2)  # a branch: the evictions of the positions it keeps stay
    assert cache.held_positions(0).tolist() == [0, len(PROMPT) - 3]


def test_bad_window_is_one_line():
    with pytest.raises(InputError, match="window >= 1"):
        SlidingWindow(0)


# ---- 3. interventions
def zero_head(layer: int, head: int, head_dim: int) -> Intervention:
    def fn(z: torch.Tensor) -> torch.Tensor:
        out = z.clone()
        out[..., head * head_dim:(head + 1) * head_dim] = 0.0
        return out
    return Intervention(f"blocks.{layer}.attn.hook_z", fn, f"head {layer}.{head} off")


def test_head_ablation_equals_transformers_with_a_hook(pair):
    hf, ours, cfg = pair
    layer, head, d = 1, 2, cfg.head_dim
    levers = Levers(interventions=(zero_head(layer, head, d),))
    ids, logits = generate(ours, PROMPT, 16, levers)
    plain, _ = generate(ours, PROMPT, 16)
    assert ids != plain

    def pre_hook(module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    handle = hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(pre_hook)
    try:
        assert ids == hf_greedy(hf, PROMPT, 16)
        with torch.no_grad():
            ref = hf(torch.tensor([PROMPT + ids[:-1]])).logits[0]
    finally:
        handle.remove()
    for k, lg in enumerate(logits):
        assert torch.allclose(lg, ref[len(PROMPT) - 1 + k], atol=1e-4)


def steer(layer: int, vector: torch.Tensor) -> Intervention:
    return Intervention(f"blocks.{layer}.hook_resid_pre", lambda x: x + vector, "steer")


@pytest.mark.parametrize("make", [
    lambda cfg: zero_head(0, 1, cfg.head_dim),
    lambda cfg: steer(2, torch.full((cfg.hidden_size,), 0.5)),
    lambda cfg: Intervention("blocks.1.hook_mlp_out", lambda x: x * 0.0, "mlp 1 off"),
    lambda cfg: Intervention("blocks.0.attn.hook_rot_k", lambda k: k * 10.0, "keys x10"),
    lambda cfg: Intervention("blocks.0.attn.hook_pattern", lambda p: torch.zeros_like(p).index_fill(-1, torch.tensor([0]), 1.0), "attend to position 0 only"),
], ids=["head", "steer", "mlp", "cached-keys", "pattern"])
def test_cached_equals_recompute_under_each_intervention(pair, make):
    _, ours, cfg = pair
    levers = Levers(interventions=(make(cfg),))
    cached, cached_logits = generate(ours, PROMPT, 24, levers)
    again, again_logits = generate(ours, PROMPT, 24, levers, cached=False)
    plain, plain_logits = generate(ours, PROMPT, 24)
    assert cached == again
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(cached_logits, again_logits))
    moved = max(float((a - b).abs().max()) for a, b in zip(cached_logits, plain_logits))
    assert moved > 1e-3  # the intervention did something


def test_hooks_record_what_the_model_goes_on_with(pair):
    _, ours, cfg = pair
    seen = {}

    def rec(name, value):
        seen[name] = value.clone()

    iv = Intervention("blocks.0.hook_mlp_out", lambda x: x * 0.0)
    loop.forward(ours, new_cache(ours), [PROMPT], Levers(interventions=(iv,)), rec)
    assert float(seen["blocks.0.hook_mlp_out"].abs().max()) == 0.0
    assert torch.equal(seen["blocks.0.hook_resid_post"], seen["blocks.0.hook_resid_mid"])


def test_unknown_point_and_wrong_shape_are_one_line(pair):
    _, ours, cfg = pair
    with pytest.raises(InputError, match="no trace point 'blocks.9.hook_resid_pre'"):
        check_interventions((Intervention("blocks.9.hook_resid_pre", lambda x: x),), cfg)
    bad = Levers(interventions=(Intervention("blocks.0.hook_resid_pre", lambda x: x[..., :2]),))
    with pytest.raises(InputError, match="returned shape"):
        loop.forward(ours, new_cache(ours), [PROMPT], bad)
    assert Hooks(()).wants("blocks.0.hook_z") is False


# ---- the sequence
def test_sequence_finish_reasons_and_stop_strings():
    seq = Sequence([1, 2], 3, 100, stop_ids=[0])
    assert seq.append(5) is None and seq.append(0) is FinishReason.EOS and seq.finish == "eos"
    seq.set_token(1, 6)  # a branch replaces the EOS
    assert seq.finish is None and seq.generated_ids == [5, 6]
    assert seq.append(7) is FinishReason.LENGTH and f"{seq.finish}" == "max_tokens"
    short = Sequence([1, 2, 3], 10, 5)
    assert short.append(4) is None and short.append(4) is FinishReason.CONTEXT_FULL


def test_stop_string_cuts_the_text(tiny_loaded):  # noqa: F811
    tok = tiny_loaded.tokenizer
    ids = tok.encode("Hello world! Tokenizers split text")
    seq = Sequence([1], 50, 100, tokenizer=tok, stop_strings=["split"])
    reason = None
    for t in ids:
        reason = seq.append(t)
        if reason:
            break
    assert reason is FinishReason.STOP_STRING and seq.text == "Hello world! Tokenizers "


from tests.support.viz_records import tiny_loaded  # noqa: E402,F401


def test_a_session_runs_its_levers_and_records_every_stage(tiny_loaded):  # noqa: F811
    from inspector.session.session import Session

    params = SamplingParams(temperature=0.9, top_k=8, seed=4)
    plain = Session(tiny_loaded, record=False)
    plain.prefill("The quick brown fox", params, max_new_tokens=6)
    banned = plain.generated_ids[0]
    s = Session(tiny_loaded, levers=Levers(processors=(Suppress([banned]),),
                                           interventions=(zero_head(0, 1, tiny_loaded.config.head_dim),)))
    s.prefill("The quick brown fox", params, max_new_tokens=6)
    for _ in s.play(params):
        pass
    assert banned not in s.generated_ids and s.finished == "max_tokens"
    sample = s.records[0].sample
    assert sample.stages == ["suppress", "temperature", "top-k", "top-p", "min-p"]
    chosen = next(c for c in sample.candidates if c.id == sample.token_id)
    assert len(chosen.stage_probs) == 5 and chosen.stage_probs[-1] == pytest.approx(chosen.prob_final)
    assert s.preview_sample(params, step=2).token_id == s.generated_ids[2]  # the same chain, the same draw
    diff, _ = s.recompute_last_step()
    assert diff < 1e-4  # cached equals recompute under the session's interventions


def test_new_levers_drop_a_forward_run_ahead(tiny_loaded):  # noqa: F811
    from inspector.session.session import Session

    def run(switch: bool) -> list[int]:
        s = Session(tiny_loaded, record=False)
        s.prefill("The quick brown fox", GREEDY, max_new_tokens=8)
        s.step(GREEDY)
        assert s.forward_ahead()
        if switch:
            s.set_levers(Levers(interventions=(steer(0, torch.full((tiny_loaded.config.hidden_size,), 3.0)),)))
            assert not s.is_ahead
        for _ in s.play(GREEDY):
            pass
        return s.generated_ids

    plain, steered = run(False), run(True)
    assert plain[:2] == steered[:2] and plain != steered
    with pytest.raises(InputError, match="no trace point"):
        Session(tiny_loaded).set_levers(Levers(interventions=(Intervention("blocks.99.hook_z", lambda x: x),)))
