"""The Attention view's head atlas section without a browser, over a tiny model: Compute the atlas draws the
analysis's atlas (kept per probe), a click on a head shows its patterns on the probe and on the page's run
(a hint without a run) and moves the view's sliders, Ablate draws the analysis's losses, Ablate in this run
makes two branches of the page's run (the top-k heads off, k random heads off) in its branch tree, and bad
input is one line each."""

from __future__ import annotations

import html
from dataclasses import replace

import numpy as np
import pytest

from inspector.analysis import heads, heads_ablation
from inspector.analysis.head_findings import ROLES
from inspector.ui.fields import sampling_params
from tests.support.lab_context import make_page, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
PROBE = (6, 2, 3)  # n, K, seed: small, so each handler is a few milliseconds on the tiny model


@pytest.fixture()
def ui(tiny_loaded):  # noqa: F811
    """A page without a browser (`tests.support.lab_context`), fresh for each test."""
    return make_page(tiny_loaded)


def section(page):
    return page.panels["attention"].atlas


def prefill(page, sid, steps: int = 3):
    params = sampling_params(0.8, 0, 1.0, 0.0, 2)
    sid, visitor = page.handlers.run_prefill(sid, PROMPT, False, "", params, 8)
    for _ in range(steps):
        page.handlers.run_step(sid, params)
    return visitor


def ok(out) -> str:
    line = status(out)
    assert 'data-error="0"' in out["status"], line
    return line


def test_compute_draws_the_atlas_of_the_probe_and_keeps_it(ui, tiny_loaded):  # noqa: F811
    sec, sid = section(ui), ui.store.new_id()
    out = sec.compute(sid, *PROBE)
    want = heads.atlas(tiny_loaded.model, heads.model_probe(tiny_loaded, *PROBE))
    assert ui.store.get(sid).labs["head_atlas"].atlas is want
    z = np.array(out["map"].data[0].z)
    assert z.shape == (2, 4) and (np.floor(z) == want.strongest()).all()
    assert "2 sequences of 6 random tokens, each repeated once (seed 3)" in out["legend"]
    line = ok(out)
    assert ">8 heads scored on 2 x 12 tokens" in line
    L, h, v = want.top("induction", 1)[0]
    assert f"induction {L}.{h} ({v:.2f})" in line
    assert "kept from an earlier computation" in ok(sec.compute(sid, *PROBE))


def test_a_clicked_head_shows_its_patterns_and_moves_the_sliders(ui, tiny_loaded):  # noqa: F811
    sec, sid = section(ui), ui.store.new_id()
    sec.compute(sid, *PROBE)
    out = sec.show_head(sid, "1.2")  # before any run: the probe alone and a hint
    assert "press Prefill on the page" in ok(out) and (out["layer"], out["head"]) == (1, 2)
    probe = heads.model_probe(tiny_loaded, *PROBE)
    (alone,) = out["pair"].data
    np.testing.assert_allclose(np.nan_to_num(np.array(alone.z, dtype=float)),
                               heads.probe_pattern(tiny_loaded, probe, 1, 2).pattern, atol=1e-6)

    visitor = prefill(ui, sid)
    out = sec.show_head(sid, "0.3")
    left, right = out["pair"].data
    run = heads.run_pattern(visitor.session, 0, 3)
    np.testing.assert_allclose(np.nan_to_num(np.array(right.z, dtype=float)), run.pattern, atol=1e-6)
    assert np.array(left.z).shape == (probe.length, probe.length)
    scores = heads.run_scores(visitor.session)
    line = ok(out)
    assert f"on this run ({len(heads.run_ids(visitor.session))} tokens)" in line
    assert f"previous-token {scores.scores['previous_token'][0, 3]:.2f}" in line
    assert (out["layer"], out["head"]) == (0, 3)
    views = ui.handlers.redraw_tab("attention")(sid, out["layer"], out["head"])  # what the click's chained redraw does
    assert views["attn_fig"].layout.title.text.replace("<br>", " ").startswith("Layer 0 head 3")


def test_ablate_draws_the_analysis_losses(ui, tiny_loaded):  # noqa: F811
    sec, sid = section(ui), ui.store.new_id()
    out = sec.ablate(sid, *PROBE, "previous_token", 2)
    atlas = heads.atlas(tiny_loaded.model, heads.model_probe(tiny_loaded, *PROBE))
    want = heads_ablation.ablation(tiny_loaded.model, atlas, "previous_token", 2, PROBE[2])
    first, repeat = out["ablation"].data
    assert list(first.y) == pytest.approx([r.loss_first for r in want.rows])
    assert list(repeat.y) == pytest.approx([r.loss_repeat for r in want.rows])
    assert list(first.x) == ["no head off", "top 2 previous-token heads", "2 random heads"]
    assert "without the top 2 previous-token heads" in ok(out) and out["map"].data  # the atlas it used, drawn


def test_ablate_in_this_run_makes_two_branches_of_it(ui, tiny_loaded):  # noqa: F811
    from inspector.session.session import Session
    from inspector.ui.branch_handlers import tree_html

    sec, sid = section(ui), ui.store.new_id()
    visitor = prefill(ui, sid)
    s = visitor.session
    was_ids, was_text = list(s.generated_ids), s.text
    out = sec.ablate_in_run(sid, *PROBE, "induction", 2)
    line = ok(out)
    atlas = heads.atlas(tiny_loaded.model, heads.model_probe(tiny_loaded, *PROBE))
    top = [(L, h) for L, h, _ in atlas.top("induction", 2)]
    rand = heads_ablation.random_heads(tiny_loaded.config, top, 2, PROBE[2])
    tree = visitor.branches
    assert [(b.id, b.parent) for b in tree.branches] == [(0, None), (1, 0), (2, 0)] and tree.current == 2
    assert tree.branches[0].generated_ids == was_ids and tree.branches[0].text == was_text
    assert tree.branches[1].label.startswith("2 random heads off (") and tree.branches[2].label.startswith(
        "top 2 induction heads off (")
    assert "branch #2: top 2 induction heads off" in line and "beside #1: 2 random heads off" in line
    assert [iv.label for iv in s.own_levers.interventions] == [f"head {L}.{h} off" for L, h in top]
    for b, chosen in ((tree.branches[2], top), (tree.branches[1], rand)):  # each is its own run again
        fresh = Session(tiny_loaded, levers=b.levers)
        params = s.records[-1].sample.params
        fresh.prefill_ids(list(s.prompt_ids), params, max_new_tokens=8)
        while len(fresh.generated_ids) < len(was_ids) and not fresh.finished:
            fresh.step(params)
        assert b.generated_ids == fresh.generated_ids
        assert [iv.label for iv in b.levers.interventions] == [f"head {L}.{h} off" for L, h in chosen]
    assert s.generated_ids == tree.branches[2].generated_ids
    top_rec, rand_rec = visitor.labs["head_atlas"].in_run
    assert top_rec.top_before == rand_rec.top_before and top_rec.step_before == rand_rec.step_before == len(was_ids) - 1
    as_was, top_bars, rand_bars = out["in_run"].data
    assert list(as_was.x)[::-1] == [p for _, p in top_rec.top_before]
    assert list(top_bars.x)[::-1] == [p for _, p in top_rec.top_after]
    assert list(rand_bars.x)[::-1] == [p for _, p in rand_rec.top_after]
    page_tree = html.unescape(tree_html(visitor))  # the page's branch tree shows both
    assert "top 2 induction heads off" in page_tree and "2 random heads off" in page_tree
    switched = ui.panels["interventions"].switch(sid, "1")  # and they are branches like any other
    assert "switched to branch #1" in status(switched) and s.generated_ids == tree.branches[1].generated_ids


def test_bad_input_is_one_line(ui, tiny_loaded):  # noqa: F811
    sec, sid = section(ui), ui.store.new_id()
    cases = [
        (lambda: sec.compute(sid, 6, 0, 0), "probes K must be a whole number from 1 to 16, got 0"),
        (lambda: sec.compute(sid, 1, 2, 0), "probe length n must be a whole number from 2 to 128, got 1"),
        (lambda: sec.compute(sid, "x", 2, 0), "probe length n must be"),
        (lambda: sec.compute(sid, 6, 2, -1), "seed must be a whole number >= 0"),
        (lambda: sec.show_head(sid, "1.2"), "no atlas yet: press Compute the atlas"),
        (lambda: sec.ablate(sid, *PROBE, "induction", 5), "top-k 5 leaves 3 other heads, too few for a random set"),
        (lambda: sec.ablate(sid, *PROBE, "induction", 9), "top-k must be a whole number from 1 to 8"),
        (lambda: sec.ablate(sid, *PROBE, "induction", 0), "top-k must be a whole number from 1 to 8"),
        (lambda: sec.ablate(sid, *PROBE, "copying", 2), "unknown head role 'copying'"),
        (lambda: sec.ablate_in_run(sid, *PROBE, "induction", 2), "nothing to ablate in yet: press Prefill"),
    ]
    for call, says in cases:
        out = call()
        line = status(out)
        assert 'data-error="1"' in out["status"] and says in line and "\n" not in line, (says, line)
        assert set(out) == {"status"}  # nothing else changes
    sec.compute(sid, *PROBE)
    for request, says in [("9.0", "layer must be a whole number from 0 to 1, got '9'"),
                          ("0.4", "query head must be a whole number from 0 to 3, got '4'"),
                          ("head", "a head is 'layer.head'")]:
        assert says in status(sec.show_head(sid, request))


def test_a_probe_past_the_context_window_is_refused_with_the_longest_that_fits(tiny_loaded):  # noqa: F811
    short = replace(tiny_loaded, config=replace(tiny_loaded.config, max_position_embeddings=40))
    page = make_page(short)  # refused from the loaded model's context before any forward
    out = section(page).compute(page.store.new_id(), 21, 2, 0)
    assert "probe length 21 repeated once is 42 tokens; the context window is 40: use a probe length of at most 20" \
        in status(out)


def test_the_state_counts_what_it_holds(ui):
    sec, sid = section(ui), ui.store.new_id()
    sec.compute(sid, *PROBE)
    state = ui.store.get(sid).labs["head_atlas"]
    a = state.atlas
    assert state.nbytes() == a.probe.ids.nbytes + sum(a.scores[r].nbytes for r in ROLES) > 0
