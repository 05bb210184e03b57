"""End-to-end: a Step pressed right after Prefill lands, after the sequence that once lost it.

The sequence (FINDINGS 2026-11-27): in the settings panel, for each number box of the run (temperature, max
new tokens, seed, top-k, top-p, min-p) and each bad value ("", "abc", -5, 1e309, 99999): the good value,
Prefill, then the bad value, Prefill and Step (each refused in one line); then every box good again,
Prefill, and Step. The last Step was lost in 2 of 4 passes: the new prefill waits in Gradio's queue while
the unqueued Step runs at once on the old run, and the page already read "prefill done" (the last run's), so
the Step was pressed before the prefill ran and its answer was then covered by the prefill's. Here that last
prefill is made slow on purpose, so the Step always comes first: it must wait for the prefill and step the
new run, and the page must say the prefill is coming until it is done.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.test_ui_e2e import T, goto, open_settings

pytestmark = [pytest.mark.slow, pytest.mark.browser]
BOXES = [("#temperature input[type=number]", "0"), ("#max-new-tokens input", "8"), ("#seed input", "0"),
         ("#top-k input[type=number]", "0"), ("#top-p input[type=number]", "1"), ("#min-p input[type=number]", "0")]
BAD = ["", "abc", "-5", "1e309", "99999"]


def enter(page: Page, selector: str, value: str) -> None:
    box = page.locator(selector)
    box.fill("")
    try:
        box.fill(value)
    except Exception:  # noqa: BLE001 - a number input refuses "abc" by fill: type it key by key
        box.press_sequentially(value)
    box.press("Tab")


def test_a_step_right_after_prefill_lands_after_refused_values(page: Page, app_url, monkeypatch):
    from inspector.session.session import Session

    page.set_viewport_size({"width": 1400, "height": 900})
    goto(page, app_url)
    page.locator("#prompt textarea").fill("Hello there")
    open_settings(page)
    for selector, good in BOXES:
        for bad in BAD:
            enter(page, selector, good)
            page.locator("#prefill-btn").click()
            expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)
            enter(page, selector, bad)
            page.locator("#prefill-btn").click()  # refused in one line (a seed of 99999 is a good one)
            page.wait_for_timeout(100)
            page.locator("#step-btn").click()
            page.wait_for_timeout(50)
    for selector, good in BOXES:
        enter(page, selector, good)

    real = Session.prefill_ids

    def slow_prefill(self, *args, **kwargs):
        time.sleep(1.5)  # the prefill still queued or running when Step arrives
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "prefill_ids", slow_prefill)
    page.locator("#prompt textarea").fill("The capital of France is")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-phase")).to_have_text("prefill: waiting", timeout=T)  # not the last run's
    page.locator("#step-btn").click()
    expect(page.locator("#status-phase")).to_have_text("decode step 1 (token 2 of 8)", timeout=30_000)
    expect(page.locator("#views-drawn-step")).to_have_attribute("data-step", "1", timeout=T)
    expect(page.locator(".ii-chip.ii-prompt")).to_have_count(
        int(page.locator("#token-count").get_attribute("data-prompt")), timeout=T)
    assert "France" in page.locator("#tokens").text_content()  # the new run was stepped, not the old one
