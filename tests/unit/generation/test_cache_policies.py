"""KV-cache policies on a tiny random model: each evicts what its rule says (checked against an
independent computation of the rule), masked per KV head exactly as an attention-score mask would,
compaction re-rotates keys to their new positions, and a budget covering the sequence changes nothing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inspector.engine.layers import apply_rope, rope_cos_sin, signed_sin
from inspector.engine.steps import new_cache
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.cache_policies import HeavyHitters, SlidingWindow, SnapKV, make_policy
from inspector.generation.levers import Intervention, Levers
from inspector.quant.kv_eval import CacheSpec, evaluate
from tests.support.engine_fixtures import tiny_model

IDS = [int(i) for i in torch.randint(0, 300, (48,), generator=torch.Generator().manual_seed(1))]
PREFILL = 20


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_a_budget_covering_the_text_gives_kl_zero_and_the_same_ids(model):
    ref = None
    for spec in [CacheSpec(name, len(IDS)) for name in ("window", "sinks", "h2o", "snapkv")] + [
            CacheSpec("window", len(IDS), rerotate=True), CacheSpec("sinks", len(IDS), rerotate=True)]:
        result, ref = evaluate(model, IDS, spec, PREFILL, ref)
        assert result["kl_mean"] == 0.0 and result["kl_p95"] == 0.0 and result["top1_agreement"] == 1.0
        assert result["ppl"] == result["ppl_full"] and result["kv_bytes"] == result["kv_bytes_full"]


@pytest.mark.parametrize("name", ["window", "sinks", "h2o", "snapkv"])
def test_a_small_budget_changes_the_predictions_and_keeps_fewer_bytes(model, name):
    result, _ = evaluate(model, IDS, CacheSpec(name, 12), PREFILL)
    assert result["kl_mean"] > 0 and result["kv_bytes"] < result["kv_bytes_full"]


def run_with_flags(model, policy, ids, prefill):
    """Teacher-force ids under the policy; per forward, the eviction flags (layer -> (KV, S) bool) in force
    while that forward ran, and its logits."""
    cache, levers = new_cache(model), Levers(cache_policy=policy)
    L, KV = model.config.num_hidden_layers, model.config.num_key_value_heads
    flags, logits = [], []
    feeds = [ids[:prefill]] + [[t] for t in ids[prefill:]]
    for feed in feeds:
        end = cache.length + len(feed)
        before = {}
        for layer in range(L):
            f = torch.zeros(KV, end, dtype=torch.bool)
            for h in range(KV):
                held = cache.held_positions(layer, 0, h)
                gone = torch.ones(cache.length, dtype=torch.bool)
                gone[held] = False
                f[h, :cache.length] = gone
            before[layer] = f
        flags.append(before)
        logits.append(loop.forward(model, cache, [feed], levers, all_positions=True)[0][-1])
    return flags, torch.stack(logits), cache


def masked_recompute(model, ids, prefill, flags):
    """The whole sequence in one forward, no policy: an intervention on every layer's attention scores
    masks, for each query, the keys (per KV head) its own forward did not see."""
    n_rep = model.config.n_rep
    T = len(ids)
    query_flags = [flags[0]] * prefill + flags[1:]  # the prefill's queries share its flags

    def mask_layer(layer):
        def fn(scores):  # (1, H, T, T)
            m = torch.zeros_like(scores, dtype=torch.bool)
            for t in range(T):
                f = query_flags[t][layer]  # (KV, S_t)
                m[0, :, t, :f.shape[1]] = f.repeat_interleave(n_rep, dim=0)
            return scores.masked_fill(m, float("-inf"))
        return fn

    ivs = tuple(Intervention(f"blocks.{L}.attn.hook_attn_scores", mask_layer(L)) for L in range(model.config.num_hidden_layers))
    out = loop.forward(model, new_cache(model), [ids], Levers(interventions=ivs), all_positions=True)[0]
    return out[prefill - 1:]


class HeadsApart:
    """Per KV head: head h evicts the positions p < newest - 4 with p % KV == h (the heads keep different keys)."""

    name = "heads-apart"
    per_head = True

    def evict_heads(self, layer, row, held):
        newest = int(held[0].max())
        return [pos[(pos % len(held) == h) & (pos < newest - 4)] for h, pos in enumerate(held)]


@pytest.mark.parametrize("policy", [HeavyHitters(10), SnapKV(12, window=4), SlidingWindow(8, 2), HeadsApart()],
                         ids=["h2o", "snapkv", "sinks", "heads-apart"])
def test_evictions_mask_each_kv_head_like_a_score_mask(model, policy):
    flags, logits, _ = run_with_flags(model, policy, IDS, PREFILL)
    assert any(bool(f[0].any()) for f in flags)  # the policy did evict
    ref = masked_recompute(model, IDS, PREFILL, flags)
    assert torch.allclose(logits, ref, atol=1e-5, rtol=0)


def test_heavy_hitters_keep_the_recent_and_the_most_attended(model):
    """H2O's rule replayed step by step from the attention the model recorded (accumulated per KV head):
    the cache holds exactly what the replay keeps, after every forward."""
    budget, recent, layer = 10, 4, 1
    policy = HeavyHitters(budget, recent)
    cache, levers = new_cache(model), Levers(cache_policy=policy)
    KV, n_rep = model.config.num_key_value_heads, model.config.n_rep
    total = torch.zeros(KV, len(IDS))
    held = [[] for _ in range(KV)]

    class Patterns:
        def wants(self, name):
            return name == f"blocks.{layer}.attn.hook_pattern"

        def __call__(self, name, value):
            if name == f"blocks.{layer}.attn.hook_pattern":
                _, H, T, S = value.shape
                total[:, :S] = total[:, :S] + value[0].reshape(KV, n_rep, T, S).sum(dim=(1, 2))

    evicted_any = False
    for feed in [IDS[:PREFILL]] + [[t] for t in IDS[PREFILL:]]:
        start = cache.length
        loop.forward(model, cache, [feed], levers, Patterns())
        for h in range(KV):
            held[h] += list(range(start, start + len(feed)))
            if len(held[h]) > budget:
                older = held[h][:-recent]
                top = set(total[h, older].topk(budget - recent).indices.tolist())
                held[h] = [p for i, p in enumerate(older) if i in top] + held[h][-recent:]
                evicted_any = True
            assert cache.held_positions(layer, 0, h).tolist() == held[h]
    assert evicted_any


def test_snapkv_compresses_the_prompt_once_by_pooled_window_votes(model):
    budget, window = 12, 4
    policy = SnapKV(budget, window=window)
    cache, levers = new_cache(model), Levers(cache_policy=policy)
    KV, n_rep = model.config.num_key_value_heads, model.config.n_rep
    seen = {}

    class Patterns:
        def wants(self, name):
            return name == "blocks.2.attn.hook_pattern"

        def __call__(self, name, value):
            if name == "blocks.2.attn.hook_pattern":
                seen["p"] = value[0].clone()

    loop.forward(model, cache, [IDS[:PREFILL]], levers, Patterns())
    p = seen["p"]  # (H, T, S)
    votes = p[:, -window:, :PREFILL - window].sum(1).view(KV, n_rep, -1).sum(1)
    pooled = F.max_pool1d(votes[:, None], 7, stride=1, padding=3)[:, 0]
    for h in range(KV):
        expect = sorted(pooled[h].topk(budget - window).indices.tolist()) + list(range(PREFILL - window, PREFILL))
        assert cache.held_positions(2, 0, h).tolist() == expect
    for t in IDS[PREFILL:PREFILL + 5]:  # decode steps evict nothing
        loop.forward(model, cache, [[t]], levers)
    assert len(cache.held_positions(2, 0, 0)) == budget + 5


def test_compaction_re_rotates_kept_keys_to_their_new_positions(model):
    cache = new_cache(model)
    captured = {}

    class Keys:
        def wants(self, name):
            return name == "blocks.0.attn.hook_k"

        def __call__(self, name, value):
            if name == "blocks.0.attn.hook_k":
                captured["k"] = value[0].clone()  # (KV, T, d) before RoPE

    loop.forward(model, cache, [IDS[:PREFILL]], rec=Keys())
    keep = torch.tensor([0, 1, 2, 3, 12, 15, 19])
    cache.compact(0, keep, loop.rerotator(model))
    assert cache.length == len(keep)
    cos, sin = rope_cos_sin(model.inv_freq, torch.arange(len(keep)), torch.float32)
    expect = apply_rope(captured["k"][:, keep], cos, signed_sin(sin))
    k, _ = cache.read(0)
    assert torch.allclose(k, expect, atol=1e-5)


def test_streaming_positions_stay_within_the_window(model):
    """Re-rotated: the cache never holds more than sinks + window + the newest token, and decoding goes on
    at contiguous positions (the cache's length) however long the text."""
    policy = SlidingWindow(6, 2, rerotate=True)
    cache, levers = new_cache(model), Levers(cache_policy=policy)
    loop.forward(model, cache, [IDS[:PREFILL]], levers)
    assert cache.length == 8
    for t in IDS[PREFILL:]:
        logits = loop.forward(model, cache, [[t]], levers)
        assert cache.length == 8 and torch.isfinite(logits).all()


@pytest.mark.parametrize("args,message", [
    (("lru", 8), "unknown policy 'lru': the policies are full, window, sinks, h2o, snapkv"),
    (("window", 0), "budget must be a whole number >= 1, got 0"),
    (("h2o", -3), "budget must be a whole number >= 1, got -3"),
    (("h2o", None), "policy h2o needs a budget"),
    (("sinks", 8, 8), "sinks must be from 1 to budget - 1 (7), got 8"),
])
def test_bad_policy_settings_name_what_is_allowed(args, message):
    with pytest.raises(InputError) as e:
        make_policy(*args)
    assert message in str(e.value) and "\n" not in str(e.value)
