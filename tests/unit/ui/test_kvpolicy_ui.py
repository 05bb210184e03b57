"""The KV policies tab's handlers and view builders without a browser, over a tiny model: Run under each
kind of policy fills the summary, the kept-positions map and the per-step KL; the map's codes agree with
the policy's rule; the layer / head selectors redraw without model work; bad controls are one line."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.lab_context import panel, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

PROMPT = "The quick brown fox jumps over the lazy dog, and the cache grows by one position per token."


@pytest.mark.parametrize("policy,budget", [("h2o", 8), ("sinks", 8), ("snapkv", 8), ("int4", None), ("full", None)])
def test_run_fills_the_views(tiny_loaded, policy, budget):  # noqa: F811
    lab = panel(tiny_loaded, "kvpolicy")
    sid = lab.page.store.new_id()
    out = lab.run_policy(sid, policy, budget, 2, 0, 0, PROMPT, False, "", 6)
    assert 'data-error="0"' in status(out), status(out)
    run = lab.page.store.get(sid).labs["kvpolicy"].run
    assert len(run.steps) == 6 and "mean KL" in out["summary"] and "full cache:" in out["summary"]
    codes = run.kept[0, 0]  # (forwards, positions) of layer 0, KV head 0
    assert codes.shape == (6, run.prompt_len + 6)
    written = [int((row != 0).sum()) for row in codes]
    assert written == [run.prompt_len + i for i in range(6)]  # one position more per forward
    kept = [int(((row >= 1) & (row <= 5)).sum()) for row in codes]
    if policy in ("h2o", "sinks"):
        assert max(kept) == 8 and (codes == 6).any()  # the budget holds and something was evicted (grey)
    if policy == "sinks":
        assert (codes[-1, :2] == 2).all()  # the two sinks stay
    if policy in ("int4", "full"):
        assert not (codes == 6).any()
    if policy == "full":
        assert run.kl_mean == 0.0 and run.top1_agreement == 1.0 and run.text == run.full_text
    assert len(out["metrics"].data[0].y) == 6 and out["map"].layout.title.text.startswith("Layer 0, KV head 0")
    sel = lab.select(sid, 1, 1)
    assert 'data-error="0"' in status(sel) and sel["map"].layout.title.text.startswith("Layer 1, KV head 1")
    assert np.array_equal(sel["map"].data[0].z, run.kept[1, 1].T)


@pytest.mark.parametrize("args,message", [
    (("lru", 8, 4), "unknown policy 'lru'"),
    (("h2o", 0, 4), "budget must be a whole number >= 1"),
    (("h2o", None, 4), "budget is empty"),
    (("sinks", 8, 8), "sinks must be from 1 to budget - 1 (7), got 8"),
    (("window", "abc", 4), "budget must be a whole number >= 1"),
])
def test_bad_controls_are_one_line(tiny_loaded, args, message):  # noqa: F811
    lab = panel(tiny_loaded, "kvpolicy")
    out = lab.run_policy(lab.page.store.new_id(), *args, 0, 0, PROMPT, False, "", 4)
    assert 'data-error="1"' in status(out) and message in status(out), status(out)


def test_selectors_before_a_run_say_so(tiny_loaded):  # noqa: F811
    lab = panel(tiny_loaded, "kvpolicy")
    out = lab.select(lab.page.store.new_id(), 0, 0)
    assert "press Run first" in status(out)


def test_flash_tiles_step_through_one_head(tiny_loaded):  # noqa: F811
    lab = panel(tiny_loaded, "kvpolicy")
    sid = lab.page.store.new_id()
    long_prompt = " ".join([PROMPT] * 3)
    out = lab.run_flash(sid, 1, 2, long_prompt, False, "")
    assert 'data-error="0"' in status(out), status(out)
    walk = lab.page.store.get(sid).labs["kvpolicy"].flash
    T = walk.m.shape[1]
    assert len(walk.tiles) == -(-T // 64) >= 2 and walk.tiles[-1][1] == T
    assert walk.hbm_tiled < walk.hbm_standard and "By formula (not measured)" in out["flash_text"]
    assert (np.diff(walk.m, axis=0) >= 0).all()  # the running max never falls
    assert (walk.out_change[1][:64] == 0).all()  # rows before the second tile's keys do not move
    sel = lab.select_tile(sid, 2)
    assert 'data-error="0"' in status(sel) and "tile 2 of" in sel["flash_tile"].layout.title.text
    bad = lab.select_tile(sid, 99)
    assert "tile must be a whole number from 1 to" in status(bad)


@pytest.fixture(scope="module")
def small_context(tmp_path_factory):
    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_checkpoint

    return load_model(str(make_tiny_checkpoint(tmp_path_factory.mktemp("ctx") / "m", max_position_embeddings=24)))


def test_context_overflow_stops_or_goes_on_with_a_window(small_context, monkeypatch):
    # random weights: no stop token, so the context or max tokens decide
    monkeypatch.setattr(type(small_context), "stop_ids", property(lambda self: frozenset()))
    lab = panel(small_context, "kvpolicy")
    prompt = "Hello world, the cache"
    n_prompt = len(small_context.tokenizer.prompt_ids(prompt, False))
    sid = lab.page.store.new_id()
    out = lab.run_policy(sid, "full", None, 4, 0, 0, prompt, False, "", 40, "stop (context full)")
    run = lab.page.store.get(sid).labs["kvpolicy"].run
    assert "finished: context_full" in status(out) and n_prompt + len(run.steps) == 24
    out = lab.run_policy(sid, "full", None, 4, 0, 0, prompt, False, "", 40, "continue with a sliding window")
    run = lab.page.store.get(sid).labs["kvpolicy"].run
    assert "finished: max_tokens" in status(out) and len(run.steps) == 40
    kept = [int(((row >= 1) & (row <= 5)).sum()) for row in run.kept[0, 0]]
    assert max(kept) == 23 and (run.kept[0, 0, -1, :4] == 2).all()  # context - 1 held, 4 sinks kept
    bad = lab.run_policy(sid, "full", None, 4, 0, 0, prompt, False, "", 4, "wrap")
    assert "when the context is full: choose" in status(bad)
