"""The KV cache view's policy control without a browser, over a tiny model: the page's generation runs under
the chosen policy (the same tokens a greedy policy run gives, the cache within the budget), Prefill keeps the
choice with a fresh policy object, a new choice runs the page's run again, the comparison with the full cache
is on the session's own tokens, and bad controls are one line."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.generation.cache_policies import HeavyHitters, KeepAll
from inspector.quant.kv_eval import CacheSpec
from inspector.quant.kv_watch import watch_policy
from inspector.ui.fields import sampling_params
from tests.support.lab_context import status
from tests.support.handlers import make

KEY = "kv_view_policy"
from tests.support.viz_records import tiny_loaded  # noqa: F401

PROMPT = "The quick brown fox jumps over the lazy dog, and the cache grows by one position per token."


def prefill_and_step(h, sid, n, temperature=0.0):
    params = sampling_params(temperature, 0, 1.0, 0.0, 3)
    sid, visitor = h.run_prefill(sid, PROMPT, False, "", params, n + 1)
    for _ in range(n):
        h.run_step(sid, params)
    return visitor


def test_generation_runs_under_the_policy_and_is_compared_on_its_tokens(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    policy = h.page.panels["kv"].policy  # the KV cache view's policy section, over the page's sessions
    sid = store.new_id()
    out = policy.apply(sid, "h2o", 8, 4, 0, 0)
    assert 'data-error="0"' in status(out) and "from the next Prefill" in status(out), status(out)
    visitor = prefill_and_step(h, sid, 5)
    s = visitor.session
    first = s.own_levers.cache_policy
    assert isinstance(first, HeavyHitters) and first.budget == 8
    for layer in range(tiny_loaded.config.num_hidden_layers):
        for head in range(tiny_loaded.config.num_key_value_heads):
            assert len(s.cache.held_positions(layer, 0, head)) <= 8
    tok = tiny_loaded.tokenizer
    greedy = watch_policy(tiny_loaded.model, list(s.prompt_ids), len(s.generated_ids), CacheSpec("h2o", 8),
                          tok.piece, tok.decode, tiny_loaded.stop_ids)
    assert [st.token_id for st in greedy.steps] == s.generated_ids  # greedy under the policy: the same text

    ids = list(s.generated_ids)
    out = policy.apply(sid, "h2o", 8, 4, 1, 1)  # the same policy again: compare only, no rerun
    assert "6 tokens of this run compared" in status(out) and "run again" not in status(out), status(out)
    assert visitor.session.generated_ids == ids
    run = visitor.labs[KEY].run
    assert [st.token_id for st in run.steps] == ids and (run.kept == 6).any()  # something was evicted
    assert out["map"].layout.title.text.startswith("Layer 1, KV head 1") and len(out["metrics"].data[0].y) == 6
    assert "a cache that freed the evicted ones would save" in out["summary"] and 'id="kv-policy-summary-text"' in out["summary"]

    visitor = prefill_and_step(h, sid, 2)  # Prefill keeps the choice, with a fresh policy object
    assert isinstance(visitor.session.own_levers.cache_policy, HeavyHitters)
    assert visitor.session.own_levers.cache_policy is not first

    out = policy.apply(sid, "full", 8, 4, 0, 0)  # a new choice: the run again under it
    assert "the run again under it, 3 tokens" in status(out), status(out)
    assert isinstance(visitor.session.own_levers.cache_policy, KeepAll)
    run = visitor.labs[KEY].run
    assert run.kl_mean == 0.0 and run.top1_agreement == 1.0
    sel = policy.select(sid, 1, 0)
    assert 'data-error="0"' in status(sel) and np.array_equal(sel["map"].data[0].z, run.kept[1, 0].T)


def test_a_sampled_run_is_compared_on_its_own_tokens(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    policy = h.page.panels["kv"].policy
    sid = store.new_id()
    policy.apply(sid, "sinks", 6, 2, 0, 0)
    visitor = prefill_and_step(h, sid, 6, temperature=1.5)
    out = policy.apply(sid, "sinks", 6, 2, 0, 0)
    run = visitor.labs[KEY].run
    assert [st.token_id for st in run.steps] == visitor.session.generated_ids, status(out)
    assert (run.kept[0, 0, -1, :2] == 2).all()  # the two sinks stay


@pytest.mark.parametrize("args,message", [
    (("int8", 8, 4), "int8 and int4 caches are in the KV policies tab"),
    (("lru", 8, 4), "the KV cache view runs the eviction policies full, window, sinks, h2o, snapkv"),
    (("h2o", 0, 4), "budget must be a whole number >= 1"),
    (("h2o", "", 4), "budget"),
    (("sinks", 8, 8), "sinks must be from 1 to budget - 1 (7), got 8"),
    (("h2o", 8, 4, 99, 0), "layer must be a whole number from 0 to"),
])
def test_bad_controls_are_one_line(tiny_loaded, args, message):  # noqa: F811
    h, store = make(tiny_loaded)
    policy = h.page.panels["kv"].policy
    full = (*args, 0, 0)[:5]
    out = policy.apply(store.new_id(), *full)
    assert 'data-error="1"' in status(out) and message in status(out), status(out)


def test_selectors_before_a_comparison_say_so(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    policy = h.page.panels["kv"].policy
    out = policy.select(store.new_id(), 0, 0)
    assert "press Generate under this policy" in status(out)
