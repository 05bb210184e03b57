"""The Interventions tab's handlers without a browser (a tiny model): apply makes a labelled branch of the
page's run, switching restores each, compare, attribution, patching and a patched cell; bad input is one
line. Then in headless chromium over the real model: ablate a head from the tab and see the branch (slow)."""

from __future__ import annotations

import re

import pytest

from tests.support.lab_context import make_ctx, status as raw_status
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)


def status(out) -> str:
    """The status line's text (its first output, tags stripped)."""
    return re.sub(r"<[^>]+>", "", raw_status(out))


@pytest.fixture
def page_run(tiny_loaded):  # noqa: F811
    """A context and a browser session whose page run is prefilled and stepped 6 times."""
    from inspector.engine.config import SamplingParams

    ctx = make_ctx(tiny_loaded)
    sid, visitor = ctx.store.get_or_create(None)
    visitor.session.prefill("The quick brown fox", SamplingParams(temperature=0.8, seed=2), max_new_tokens=8)
    for _ in range(6):
        visitor.session.step(SamplingParams(temperature=0.8, seed=2))
    return ctx, sid, visitor


def test_apply_makes_a_labelled_branch_and_switching_restores_each(page_run):
    ctx, sid, visitor = page_run
    before = list(visitor.session.generated_ids)
    out = ctx.panels["interventions"].apply(sid, "head output (attn.hook_z)", "zero", "1", "2", "0", "1", "0", "", "", "0")
    assert status(out) == "branch #1: head 1.2 off (7 tokens run again under it)"
    assert "head 1.2 off ◀ in use" in out["branches"] and "data-branches='2'" in out["branches"]
    assert len(visitor.session.generated_ids) == len(before) and visitor.session.levers.interventions[0].label == "head 1.2 off"
    out = ctx.panels["interventions"].ablate_part(sid, "mlp 0")  # a DLA bar click stacks on the branch in use
    assert status(out).startswith("branch #2: MLP 0 off") and len(visitor.session.levers.interventions) == 2
    assert visitor.branches.branches[2].parent == 1
    out = ctx.panels["interventions"].switch(sid, "0")
    assert status(out) == "switched to branch #0" and visitor.session.generated_ids == before
    assert visitor.session.levers.interventions == ()
    out = ctx.panels["interventions"].compare_branches(sid, "0", "2")
    assert status(out) == "compared #0 and #2" and "compare-table" in out["compare"]
    out = ctx.panels["interventions"].attribution(sid, "-1")
    assert status(out) == "attribution of step 6" and "dla-bars" in out["dla"] and "commitment-strip" in out["strip"]


def test_patching_and_a_patched_cell(page_run):
    ctx, sid, _ = page_run
    out = ctx.panels["interventions"].patching.sweep(sid, "the dog sat on the mat", "the bat sat on the mat", "#", "!", "resid_pre")
    assert "must be exactly one token" not in status(out), status(out)
    assert status(out).startswith("patched 2 layers x 16 positions") and out["table"].count("ii-patch-cell") == 32
    out = ctx.panels["interventions"].patching.patched_cell(sid, "0:3")
    assert status(out) == "patched run at layer 0, position 3" and "greedy continuation" in out["patched"]


@pytest.mark.parametrize("args,message", [
    (("head output (attn.hook_z)", "zero", "2", "0"), "layer must be a whole number from 0 to 1, got '2'"),
    (("head output (attn.hook_z)", "zero", "0", "9"), "head must be a whole number from 0 to 3, got '9'"),
    (("head output (attn.hook_z)", "zero", "", "0"), "layer is empty"),
    (("MLP output", "mean", "0", "0"), "unknown mlp_out operation 'mean': use one of zero, scale"),
    (("nowhere", "zero", "0", "0"), "unknown point 'nowhere'"),
])
def test_bad_apply_input_is_one_line(page_run, args, message):
    ctx, sid, _ = page_run
    out = ctx.panels["interventions"].apply(sid, *args, "0.5", "1", "0", "love", "hate", "4")
    assert message in status(out) and 'data-error="1"' in out["status"]


def test_bad_input_elsewhere_is_one_line(page_run, tiny_loaded):  # noqa: F811
    ctx, sid, _ = page_run
    assert "steering needs two non-empty prompts" in status(
        ctx.panels["interventions"].apply(sid, "steer at resid_pre", "zero", "1", "0", "1", "1", "0", " ", "x", "4"))
    assert "branch must be a whole number from 0 to 0" in status(ctx.panels["interventions"].switch(sid, "5"))
    assert "patching needs prompts of the same token length" in status(
        ctx.panels["interventions"].patching.sweep(sid, "the dog sat", "the bat sat on", "#", "!", "resid_pre"))
    assert "run a patching sweep first" in status(ctx.panels["interventions"].patching.patched_cell(sid, "0:0"))
    fresh = make_ctx(tiny_loaded)
    assert "press Prefill on the page first" in status(fresh.panels["interventions"].attribution(None, "-1"))


@pytest.mark.slow
@pytest.mark.browser
def test_ablate_a_head_from_the_tab_and_see_a_branch(page, app_url):  # noqa: F811
    """Prefill and step on the page, open Interventions, switch off head 5.3: a labelled branch appears in the
    tab and in the page's branch tree; a click on a DLA bar ablates that part too; bad layer is one line."""
    from playwright.sync_api import expect

    from tests.support.browser import goto, open_view, prefill

    T = 120_000
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    prefill(page, "The capital of France is", max_new=6)
    for _ in range(3):
        page.locator("#step-btn").click()
        page.wait_for_timeout(300)
    open_view(page, "Interventions")
    status = page.locator("#iv-status")
    page.locator("#iv-layer textarea, #iv-layer input").first.fill("31")
    page.locator("#iv-apply").click()
    expect(status).to_contain_text("layer must be a whole number from 0 to 29, got '31'", timeout=T)
    page.locator("#iv-layer textarea, #iv-layer input").first.fill("5")
    page.locator("#iv-head textarea, #iv-head input").first.fill("3")
    page.locator("#iv-apply").click()
    expect(status).to_contain_text("branch #1: head 5.3 off", timeout=T)
    expect(page.locator("#iv-branches")).to_have_attribute("data-branches", "2", timeout=T)
    expect(page.locator("#iv-branches")).to_contain_text("head 5.3 off ◀ in use")
    page.locator("#iv-attribute").click()
    expect(page.locator("#dla-bars")).to_be_visible(timeout=T)
    expect(page.locator("#commitment-strip")).to_contain_text("Commitment layer")
    page.locator(".ii-dla-bar[data-part]").first.click()
    expect(page.locator("#iv-branches")).to_have_attribute("data-branches", "3", timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_interventions.png"), full_page=True)


from tests.support.ui_server import ARTIFACTS  # noqa: E402
