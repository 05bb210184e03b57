"""The token chips are a list slot (`inspector.ui.bundle.ViewSlot(items=...)`): an update redraws only the chips
whose HTML changed. What the page then shows must be exactly what the whole HTML would show, through Steps,
a selection, its clearing, Play, Reset and a new run (the HTML's split into one part per chip:
tests/unit/ui/test_page_lists.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, click_chip, goto, prefill, step

# The chips' DOM against a fresh parse of the last chips' HTML the page received (`window.iiViews.chips`).
SAME_AS_FULL = """() => {
  const slot = document.querySelector('.ii-slot[data-view="chips"]');
  const fresh = document.createElement('div');
  fresh.innerHTML = window.iiViews.chips;
  return [slot.innerHTML === fresh.innerHTML, slot.querySelectorAll('.ii-chip').length,
          fresh.querySelectorAll('.ii-chip').length];
}"""


@pytest.mark.slow
@pytest.mark.browser
def test_chips_patched_in_place_show_what_the_whole_html_shows(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 900})
    goto(page, app_url)
    same = lambda: page.evaluate(SAME_AS_FULL)  # noqa: E731

    prefill(page, "What is gravity?", max_new=12)
    n = page.locator(".ii-chip").count()
    for k in (1, 2, 3):
        step(page, k, max_new=12)
        assert same() == [True, n + k, n + k]
    page.locator('.ii-chip[data-pos="0"]').evaluate("c => { c.iiMark = 1; }")  # this element, not a copy
    click_chip(page, 2)
    expect(page.locator('.ii-chip[data-pos="2"].ii-selected')).to_have_count(1, timeout=T)
    step(page, 4, max_new=12)
    expect(page.locator(".ii-chip.ii-selected")).to_have_count(1, timeout=T)
    assert same()[0]
    click_chip(page, 2, want="-1")  # the selected chip clicked again: no selection
    expect(page.locator(".ii-chip.ii-selected")).to_have_count(0, timeout=T)
    step(page, 5, max_new=12)
    assert same()[0]
    # a chip whose HTML did not change is the same element after those Steps, not a new one
    assert page.locator('.ii-chip[data-pos="0"]').evaluate("c => c.iiMark") == 1

    page.locator("#play-btn").click()  # Play to the end (12 new tokens at most)
    expect(page.locator("#status-phase")).to_contain_text("finished", timeout=T)
    assert same()[0]
    page.locator("#reset-btn").click()
    expect(page.locator("#token-chips.ii-empty")).to_be_visible(timeout=T)
    assert page.locator(".ii-chip").count() == 0
    prefill(page, "Write a haiku about the sea.", max_new=12)  # a new run: another prompt, other chips
    assert same() == [True, page.locator(".ii-chip").count(), page.locator(".ii-chip").count()]
    step(page, 1, max_new=12)
    assert same()[0]
