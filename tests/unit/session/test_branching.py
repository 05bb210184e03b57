"""Branching: the branch tree, `Session.follow`, and the page's branch / switch handlers (tiny model)."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.ui.branch_handlers import branch, switch
from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.session.branches import MAX_BRANCHES, BranchTree
from inspector.session.session import Session
from inspector.ui.branch_handlers import parse_branch_request
from tests.support.handlers import SAMPLING, make, other_token, status
from tests.support.viz_records import tiny_loaded  # noqa: F401


GREEDY = SamplingParams()


def run(loaded, prompt: str = "The quick brown fox", steps: int = 6, max_new: int = 12) -> Session:
    s = Session(loaded)
    s.prefill(prompt, GREEDY, max_new_tokens=max_new)
    for _ in range(steps):
        s.step(GREEDY)
    return s


def cache_rows(s: Session) -> list[tuple[np.ndarray, np.ndarray]]:
    return [tuple(t.numpy().copy() for t in s.cache.read(layer)) for layer in range(s.config.num_hidden_layers)]


def test_tree_forks_syncs_and_caps():
    tree = BranchTree([1, 2, 3], "abc")
    b = tree.fork(1, 9, "x", [1, 9], "ax")
    assert (b.id, b.parent, tree.current, tree.depth(b.id)) == (1, 0, 1, 1)
    tree.sync([1, 9, 4], "ax4")
    assert tree.get(1).generated_ids == [1, 9, 4] and tree.get(0).generated_ids == [1, 2, 3]
    with pytest.raises(InputError, match="no branch 5"):
        tree.get(5)
    for i in range(MAX_BRANCHES - 2):
        tree.fork(0, i, "y", [i], "y")
    with pytest.raises(InputError, match="branches, the most kept"):
        tree.fork(0, 1, "z", [1], "z")


def test_parse_branch_request():
    assert parse_branch_request(" 3:1234 ") == (3, 1234)
    for bad in ("", "3", "a:b", "1:2:3", None):
        with pytest.raises(InputError, match="step:token id"):
            parse_branch_request(bad)


def test_follow_restores_a_branch_as_if_generated_step_by_step(tiny_loaded):
    s = run(tiny_loaded)
    root = list(s.generated_ids)
    root_logits = [r.logits.copy() for r in s.records]
    forced = other_token(s, 2)
    s.branch(2, forced)
    for _ in range(3):
        s.step(GREEDY)
    branch = list(s.generated_ids)
    assert branch[:2] == root[:2] and branch[2] == forced and len(branch) == 6
    branch_cache = cache_rows(s)

    s.follow(root)  # back to the run as sampled: replays steps 2.. of the root
    assert s.generated_ids == root
    assert all(np.array_equal(a.logits, b) for a, b in zip(s.records, root_logits))
    fresh = run(tiny_loaded)  # the same run made from scratch: same cache, same records
    assert s.cache.length == fresh.cache.length
    for (k, v), (k2, v2) in zip(cache_rows(s), cache_rows(fresh)):
        np.testing.assert_allclose(k, k2, atol=1e-6)
        np.testing.assert_allclose(v, v2, atol=1e-6)

    s.follow(branch)  # and forward again to the branch
    assert s.generated_ids == branch
    for (k, v), (k2, v2) in zip(cache_rows(s), branch_cache):
        np.testing.assert_allclose(k, k2, atol=1e-6)
        np.testing.assert_allclose(v, v2, atol=1e-6)
    s.follow(branch[:3])  # a prefix: rewinds
    assert s.generated_ids == branch[:3] and s.cache.length == len(s.prompt_ids) + 2


def test_page_branch_and_switch(tiny_loaded):
    h, store = make(tiny_loaded)
    sid, *views = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 12, 0, 0)
    for _ in range(4):
        views = h.step(sid, *SAMPLING, 0, 0)
    s = store.get(sid).session
    root = list(s.generated_ids)
    assert 'data-branches="1"' in views["branches"]
    h.show_tab("sampling")(sid, 0, 0)
    info = h.views(store.get(sid), 0, 0)["samp_info"]
    assert f'class="ii-branch-force ii-chosen" data-step="4" data-id="{root[4]}"' in info

    forced = other_token(s, 3)
    views = branch(h, sid, f"3:{forced}", 0, 0)
    assert "branched: step 3" in status(views) and "ii-error" not in status(views)
    assert s.generated_ids == root[:3] + [forced]
    tree = views["branches"]
    assert 'data-branches="2" data-current="1"' in tree and 'data-branch="0"' in tree
    h.step(sid, *SAMPLING, 0, 0)
    forked = list(s.generated_ids)

    views = switch(h, sid, "0", 0, 0)
    assert "switched to branch #0" in status(views) and s.generated_ids == root
    assert 'data-current="0"' in views["branches"]
    views = switch(h, sid, 1, 0, 0)
    assert s.generated_ids == forked

    for bad, msg in [("3:" + str(s.generated_ids[3]), "already took"), ("99:1", "no step 99"), ("x", "step:token")]:
        assert msg in status(branch(h, sid, bad, 0, 0))
    assert "no branch 7" in status(switch(h, sid, "7", 0, 0))
    h.prefill(sid, "Hello world", False, "", *SAMPLING, 4, 0, 0)  # a new run starts a new tree
    assert store.get(sid).branches is None
