"""Branches from any step of a run, the tree's divergence marks, and branches that travel: in a link and in a
trace file (tiny model, no browser)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import numpy as np
import pytest
import torch

from inspector.ui.branch_handlers import branch, switch
from inspector.ui.link_handlers import link_fill, link_run
from inspector.engine import steps as engine
from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.generation import loop
from inspector.session.branches import BranchTree, SavedBranch, SavedTree, first_divergence
from inspector.session.session import Session
from inspector.session.trace_file import load_trace, save_trace
from inspector.session.tree_replay import grow_tree
from inspector.ui import trace_io
from inspector.ui.link_handlers import link_query_for
from inspector.ui.run_links import RunLink, link_query, link_tree, parse_link
from tests.support.handlers import make, other_token, status
from tests.support.handlers import no_run_ahead  # noqa: F401
from tests.support.viz_records import tiny_loaded  # noqa: F401

SAMPLED = SamplingParams(temperature=0.9, top_k=8, seed=4)
SAMPLING = (0.9, 8, 1.0, 0.0, 4)  # the page's controls for SAMPLED
PROMPT = "The quick brown fox"


def views_branches(views) -> str:
    return views["branches"]


def full_forward(loaded, ids: list[int]) -> torch.Tensor:
    """Logits (T, V) of every position of `ids`, one forward into a fresh cache: no branching involved."""
    cache = engine.new_cache(loaded.model)
    with torch.inference_mode():
        return loop.forward(loaded.model, cache, [ids], all_positions=True)[0].float(), cache


def test_a_branch_at_an_earlier_step_equals_a_fresh_run_of_its_tokens(tiny_loaded):  # noqa: F811
    s = Session(tiny_loaded)
    s.prefill(PROMPT, SAMPLED, max_new_tokens=16)
    for _ in range(7):
        s.step(SAMPLED)
    root = list(s.generated_ids)
    forced = other_token(s, 2)  # step 2 of 7: not the newest
    s.branch(2, forced)
    for _ in range(4):
        s.step(SAMPLED)
    ids = list(s.generated_ids)
    assert ids[:2] == root[:2] and ids[2] == forced and len(ids) == 7

    # the same tokens fed at once into a fresh cache: every step's logits and the cache agree
    n = len(s.prompt_ids)
    logits, cache = full_forward(tiny_loaded, s.prompt_ids + ids[:-1])  # (n + 6, V)
    for k, f in enumerate(s.trace.forwards):
        np.testing.assert_allclose(f.logits.float().numpy(), logits[n - 1 + k].numpy(), atol=1e-4)
    for layer in range(s.config.num_hidden_layers):
        (k1, v1), (k2, v2) = s.cache.read(layer), cache.read(layer)
        np.testing.assert_allclose(k1.numpy(), k2.numpy(), atol=1e-5)
        np.testing.assert_allclose(v1.numpy(), v2.numpy(), atol=1e-5)
    # and a fresh session stepped with the same draws gives the same tokens after the fork
    fresh = Session(tiny_loaded)
    fresh.prefill(PROMPT, SAMPLED, max_new_tokens=16)
    fresh.follow(ids)
    assert fresh.generated_ids == ids and fresh.text == s.text
    assert [r.extra.get("forced", False) for r in fresh.records] == [k == 2 for k in range(7)]


def test_the_page_branches_from_a_clicked_token(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    sid, *views = h.prefill(None, PROMPT, False, "", *SAMPLING, 16, 0, 0)
    for _ in range(6):
        views = h.step(sid, *SAMPLING, 0, 0)
    s = store.get(sid).session
    n, root = len(s.prompt_ids), list(s.generated_ids)
    assert 'id="branch-point"' in views_branches(views) and 'data-step=""' in views_branches(views)  # the hint

    views = h.select(sid, n + 2, 0, 0)  # the chip of generated token 3: drawn by step 2
    point = views_branches(views)
    assert 'id="branch-point" class="ii-branch-point" data-step="2"' in point
    assert f'class="ii-branch-force ii-chosen" data-step="2" data-id="{root[2]}"' in point
    forced = other_token(s, 2)
    assert f'data-step="2" data-id="{forced}"' in point
    views = branch(h, sid, f"2:{forced}", 0, 0)
    assert "branched: step 2" in status(views) and s.generated_ids == root[:2] + [forced]
    h.step(sid, *SAMPLING, 0, 0)
    tree = views_branches(h.step(sid, *SAMPLING, 0, 0))
    assert 'data-branches="2" data-current="1"' in tree
    assert tree.count('class="ii-diverge"') == 1 and '<mark class="ii-diverge" data-step="2"' in tree
    assert 'aria-current="true"' in tree.split('data-branch="1"')[1].split(">")[0]
    piece = tiny_loaded.tokenizer.decode_bytes([forced]).decode("utf-8", "replace")
    assert f'parent (step 2)">{piece}</mark>' in tree or f'parent (step 2)">{piece.replace("&", "&amp;")}</mark>' in tree


def test_the_first_divergence_and_the_saved_tree():
    assert first_divergence([1, 2, 3], [1, 2, 4, 5]) == 2 and first_divergence([1, 2], [1, 2, 3]) is None
    tree = BranchTree([1, 2, 3, 4], "abcd")
    tree.fork(1, 9, "x", [1, 9], "ax")
    tree.sync([1, 9, 7], "ax7")
    tree.fork_levers("head 0.1 off", object(), [5, 6], "ef")  # an intervention branch: its levers cannot travel
    tree.fork(1, 8, "y", [5, 8], "ey")  # ... nor can what grew from it
    tree.current = 1
    saved, left_out = tree.saved()
    assert left_out == 2 and saved.current == 1
    assert [(b.parent, b.at_step, b.forced_id, b.generated_ids) for b in saved.branches] == \
        [(None, None, None, [1, 2, 3, 4]), (0, 1, 9, [1, 9, 7])]
    back = BranchTree.from_saved(saved, levers="L")
    assert back.current == 1 and [b.generated_ids for b in back.branches] == [[1, 2, 3, 4], [1, 9, 7]]
    assert all(b.levers == "L" for b in back.branches)
    tree.current = 3  # shown: the intervention's child; the link and the file show its nearest kept ancestor
    assert tree.branches[2].parent == 1 and tree.saved()[0].current == 1


def page_tree(h, store) -> str:
    """A run with three branches on the page: two from the root at different steps, one from branch 1;
    branch 1 is shown at the end. Returns the session id."""
    sid, *_ = h.prefill(None, PROMPT, False, "", *SAMPLING, 16, 0, 0)
    for _ in range(6):
        h.step(sid, *SAMPLING, 0, 0)
    s = store.get(sid).session
    assert "ii-error" not in status(branch(h, sid, f"4:{other_token(s, 4)}", 0, 0))
    h.step(sid, *SAMPLING, 0, 0)
    assert "ii-error" not in status(switch(h, sid, "0", 0, 0))
    assert "ii-error" not in status(branch(h, sid, f"1:{other_token(s, 1)}", 0, 0))
    for _ in range(3):
        h.step(sid, *SAMPLING, 0, 0)
    assert "ii-error" not in status(branch(h, sid, f"3:{other_token(s, 3)}", 0, 0))  # a fork of branch 2
    assert "ii-error" not in status(switch(h, sid, "1", 0, 0))
    return sid


def tree_shape(visitor) -> list[tuple]:
    t = visitor.branches
    return [(b.parent, b.at_step, b.forced_id, b.generated_ids, b.text) for b in t.branches] + [t.current]


def test_a_link_carries_every_branch_and_the_shown_one(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    sid = page_tree(h, store)
    visitor = store.get(sid)
    query, line = link_query_for(h, sid)
    assert query.startswith("?prompt=") and "ii-error" not in status(line)
    params = dict(parse_qsl(query[1:]))
    assert params["prompt"] == PROMPT and params["seed"] == "4" and params["branch"] == "1"
    assert len(params["branches"].split("_")) == 3 and params["branches"].split("_")[2].startswith("2-3-")
    # the prompt box edited since the run does not change the link: it is made from the session
    link = parse_link(params)
    assert link_tree(link).current == 1

    sid2 = store.new_id()
    filled = link_fill(type("R", (), {"query_params": params})())
    out = link_run(h, sid2, filled[-1], 0, 0)
    assert "opened from a link: prefill + 6 steps, 4 branches, showing #1" in status(out[1:])
    opened = store.get(sid2)
    assert tree_shape(opened) == tree_shape(visitor)
    assert opened.session.generated_ids == visitor.session.generated_ids
    for a, b in zip(opened.session.records, visitor.session.records):
        np.testing.assert_allclose(a.logits.astype(np.float32), b.logits.astype(np.float32), atol=1e-3)
    # the opened tree is live: switching replays branch 3 there as on the original page
    switch(h, sid2, "3", 0, 0)
    switch(h, sid, "3", 0, 0)
    assert opened.session.generated_ids == visitor.session.generated_ids


def test_a_link_without_branches_is_sampled_as_before(tiny_loaded):  # noqa: F811
    link = RunLink(prompt="hi", temperature=0.8, seed=5, max_new=8, steps=3)
    keys = dict(parse_qsl(link_query(link)))  # by key: max_new_tokens, the request's name, holds "tokens"
    assert "tokens" not in keys and "branch" not in link_query(link) and link_tree(link) is None


@pytest.mark.parametrize("query, message", [
    ({"tokens": "1.x"}, "link parameter tokens is token ids joined by '.': token id must be a whole number"),
    ({"tokens": "1.2", "steps": "5"}, "link parameter steps must be the count of tokens less one"),
    ({"branches": "0-0-1"}, "link parameters branches and branch need tokens"),
    ({"tokens": "1.2", "branches": "0-0"}, "branch 1 is 'parent-step-ids'"),
    ({"tokens": "1.2", "branches": "1-0-5"}, "branch 1: parent must be a whole number from 0 to 0, got '1'"),
    ({"tokens": "1.2", "branches": "0-2-5"}, "branch 1: its fork step must be 0 to 1, got 2"),
    ({"tokens": "1.2", "branches": "0-1-"}, "token id is empty"),
    ({"tokens": "1.2", "branch": "1"}, "the shown branch must be 0 to 0, got 1"),
    ({"tokens": "1.2", "branch": "-1"}, "link parameter branch: branch must be a whole number"),
    ({"tokens": "1.2", "branches": "_".join(["0-0-5"] * 40)}, "a run keeps at most 31 besides its own"),
])
def test_bad_branch_parameters_name_what_is_allowed(query, message):
    with pytest.raises(InputError) as err:
        parse_link({"prompt": "hi", **query})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_link_naming_tokens_the_model_lacks_is_one_line(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    for tokens, message in [("1.99999999", "branch 0 cannot be replayed: token id 99999999 is outside"),
                            (".".join(["5"] * 40), "branch 0 cannot be replayed: the run finished")]:
        filled = link_fill(type("R", (), {"query_params": {"prompt": PROMPT, "chat": "0", "max_new": "8",
                                                             "tokens": tokens}})())
        out = link_run(h, store.new_id(), filled[-1], 0, 0)
        assert message in status(out[1:]) and "ii-error" in status(out[1:])


def test_grow_tree_refuses_before_a_prefill(tiny_loaded):  # noqa: F811
    with pytest.raises(InputError, match="run prefill first"):
        grow_tree(Session(tiny_loaded), SavedTree([SavedBranch(None, None, None, "", [1], "")]))


def test_a_saved_trace_keeps_every_branch(tiny_loaded, tmp_path):  # noqa: F811
    h, store = make(tiny_loaded)
    sid = page_tree(h, store)
    visitor = store.get(sid)
    path, line = trace_io.export_trace(h, sid, "the box's edited text", True, "")
    assert "4 branches" in status(line)
    back = load_trace(path, tiny_loaded)
    assert back.settings["prompt"] == PROMPT and back.settings["chat"] is False  # the run's, not the box's
    assert back.saved_tree.current == 1 and len(back.saved_tree.branches) == 4

    h2, store2 = make(tiny_loaded)
    sid2 = store2.new_id()
    views = trace_io.import_trace(h2, sid2, path, 0, 0)
    opened = store2.get(sid2)
    assert "opened" in status(views) and tree_shape(opened) == tree_shape(visitor)
    assert 'data-branches="4" data-current="1"' in views_branches(views)
    assert views_branches(views).count('class="ii-diverge"') == 3
    switch(h, sid, "2", 0, 0)
    switch(h2, sid2, "2", 0, 0)  # switching replays the branch with the recording model
    assert opened.session.generated_ids == visitor.session.generated_ids
    query, _ = link_query_for(h2, sid2)  # a link from the opened trace: its saved prompt and tree
    assert dict(parse_qsl(query[1:]))["prompt"] == PROMPT

    read_only = load_trace(path)  # no model: the tree is shown, the branches read from the file
    assert read_only.read_only and len(read_only.saved_tree.branches) == 4


def test_inspector_trace_prints_every_saved_branch(tiny_loaded, tmp_path, capsys):  # noqa: F811
    import json

    from inspector.commands.cli import main

    h, store = make(tiny_loaded)
    sid = page_tree(h, store)
    path, _ = trace_io.export_trace(h, sid, PROMPT, False, "")
    tree = store.get(sid).branches
    assert main(["trace", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["shown_branch"] == 1 and out["generated_ids"] == tree.branches[1].generated_ids
    assert [(b["parent"], b["at_step"], b["forced_id"], b["generated_ids"], b["text"]) for b in out["branches"]] \
        == [(b.parent, b.at_step, b.forced_id, b.generated_ids, b.text) for b in tree.branches]
    assert main(["trace", str(path)]) == 0
    text = capsys.readouterr().out
    assert "branches: 4 (the file's tokens are branch 1's)" in text
    assert "branch 1 [shown]: from branch 0 at step 4" in text
    assert text.count("  branch ") == 4


def test_a_tree_that_does_not_fit_the_run_is_refused(tiny_loaded, tmp_path):  # noqa: F811
    s = Session(tiny_loaded)
    s.prefill(PROMPT, SAMPLED, max_new_tokens=8)
    s.step(SAMPLED)
    wrong = SavedTree([SavedBranch(None, None, None, "", [1, 2], "")])
    with pytest.raises(InputError, match="does not hold the run's tokens"):
        save_trace(s, tmp_path / "t.safetensors", branches=wrong)
    bad = SavedTree([SavedBranch(None, None, None, "", list(s.generated_ids), ""),
                     SavedBranch(0, 5, 3, "", [3], "")])
    with pytest.raises(InputError, match="branch 1: its fork step must be 0 to 1, got 5"):
        save_trace(s, tmp_path / "t.safetensors", branches=bad)


def test_the_link_button_refuses_in_one_line(tiny_loaded, monkeypatch):  # noqa: F811
    h, store = make(tiny_loaded)
    query, line = link_query_for(h, store.new_id())
    assert query == "" and "press Prefill first" in status(line) and "ii-error" in status(line)
    sid, *_ = h.prefill(None, PROMPT, False, "", *SAMPLING, 8, 0, 0)
    monkeypatch.setattr("inspector.ui.link_handlers.MAX_LINK_CHARS", 40)
    query, line = link_query_for(h, sid)
    assert query == "" and "too long for an address: save a trace instead" in status(line)
