"""Branches in the browser over the real default model, at 1280 px and on a 390 px phone: click an earlier
generated token, force another candidate there, and the tree shows the new branch with its first diverging
token marked; the page's link opened in a fresh browser context, and the saved trace opened in another one,
show the same branches and the same shown branch."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, chip_ids, click_chip, goto, prefill, prompt_len, save_trace_as, step, upload
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
MAX_NEW = 12


def tree_of(page: Page) -> list[tuple[str, str]]:
    """Each branch row: its id and its text, the diverging token in [brackets]."""
    return page.locator("#branch-tree .ii-branch-node").evaluate_all(
        "rows => rows.map(r => [r.dataset.branch, Array.from(r.querySelector('.ii-branch-text').childNodes)"
        ".map(n => n.nodeName === 'MARK' ? `[${n.textContent}]` : n.textContent).join('')])")


def choose_step(page: Page, position: int, step_no: int) -> None:
    """Click the chip at `position`; the branch point shows `step_no`."""
    click_chip(page, position)
    expect(page.locator("#branch-point")).to_have_attribute("data-step", str(step_no), timeout=T)


def same_branches(page: Page, want_tree, want_chips) -> None:
    expect(page.locator("#branch-tree")).to_have_attribute("data-branches", "2", timeout=T)
    expect(page.locator("#branch-tree")).to_have_attribute("data-current", "1")
    assert tree_of(page) == want_tree
    assert chip_ids(page) == want_chips


@pytest.mark.parametrize("width", [1280, 390])
def test_branch_from_an_earlier_token_then_link_and_trace(browser, app_url, tmp_path, width):
    size = {"width": width, "height": 900}
    a = browser.new_context(viewport=size)
    pa = a.new_page()
    goto(pa, app_url)
    prefill(pa, "The capital of France is", max_new=MAX_NEW)
    for k in range(1, 6):
        step(pa, k, max_new=MAX_NEW)
    original = chip_ids(pa)
    n = prompt_len(pa)
    expect(pa.locator("#branch-point")).to_have_attribute("data-step", "")  # the hint: no token chosen yet

    choose_step(pa, n + 2, 2)  # generated token 3, drawn at step 2 (the newest step is 5)
    expect(pa.locator("#branch-point .ii-branch-force.ii-chosen")).to_have_attribute("data-id", original[n + 2])
    other = pa.locator("#branch-point .ii-branch-force:not(.ii-chosen)").first
    forced = other.get_attribute("data-id")
    other.click()
    expect(pa.locator("#status-message")).to_contain_text("branched: step 2", timeout=T)
    expect(pa.locator("#branch-tree")).to_have_attribute("data-branches", "2", timeout=T)
    expect(pa.locator("#branch-tree")).to_have_attribute("data-current", "1")
    mark = pa.locator('.ii-branch-node[data-branch="1"] mark.ii-diverge')
    expect(mark).to_have_attribute("data-step", "2")
    expect(mark).to_be_visible()
    expect(pa.locator('.ii-branch-node[data-branch="0"] mark')).to_have_count(0)  # the root has no parent
    expect(pa.locator('.ii-branch-node[aria-current="true"]')).to_have_attribute("data-branch", "1")
    expect(pa.locator(".ii-chip.ii-gen").last).to_have_attribute("data-id", forced)
    assert chip_ids(pa)[:n + 2] == original[:n + 2]
    step(pa, 3, max_new=MAX_NEW)  # the branch goes on from the forced token
    width_now = pa.evaluate("document.documentElement.scrollWidth")
    assert width_now <= width, f"the page is {width_now} px wide at {width} px"
    pa.screenshot(path=str(ARTIFACTS / f"branches_{width}.png"), full_page=True)
    tree, chips = tree_of(pa), chip_ids(pa)
    assert "[" in tree[1][1] and tree[0][1] != tree[1][1]

    # the page's link, opened in a fresh browser context: the same tree, the same shown branch, and the
    # prompt that was run, not the box's text edited since
    pa.locator("#prompt textarea").fill("an edited prompt that was never run")
    pa.locator("#link-btn").click()
    link = pa.locator("#run-link textarea")
    expect(link).to_have_value(re.compile(r"^http.*\?prompt=.*&tokens=.*&branches=0-2-"), timeout=T)
    b = browser.new_context(viewport=size)
    pb = b.new_page()
    goto(pb, link.input_value())
    expect(pb.locator("#status-message")).to_contain_text("2 branches, showing #1", timeout=T)
    same_branches(pb, tree, chips)
    expect(pb.locator("#prompt textarea")).to_have_value("The capital of France is")
    goto(pb, f"{app_url}?prompt=hi&tokens=1.2&branches=0-9-5")  # a hand-edited link: one line, the page lives
    expect(pb.locator("#status-message")).to_contain_text("link parameter branches: branch 1: its fork step", timeout=T)
    b.close()

    # the saved trace, opened in another browser context: the same tree, the same shown branch
    path = save_trace_as(pa, tmp_path / "branches.safetensors", "2 branches")
    c = browser.new_context(viewport=size)
    pc = c.new_page()
    goto(pc, app_url)
    upload(pc, str(path))
    expect(pc.locator("#status-message")).to_contain_text("opened", timeout=T)
    same_branches(pc, tree, chips)
    pc.locator('.ii-branch-node[data-branch="0"]').click()  # switching replays the root on the page's model
    expect(pc.locator("#branch-tree")).to_have_attribute("data-current", "0", timeout=T)
    assert chip_ids(pc) == original
    c.close()
    a.close()
