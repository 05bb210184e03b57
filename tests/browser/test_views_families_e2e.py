"""End-to-end, headless chromium over the real default model: what the views add for engineers and learners.

Generated chips carry their commitment layer ("decided at layer N", from the logit lens); the Timing view's
"Time operations" re-runs a chosen step with a timer and shows the per-operation table (bytes, GB/s against
the measured bandwidth) and the roofline, and refuses a bad step in one line; the Models tab's device
picker offers the devices present (cpu here) and says the model is already there. Screenshot in
test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view, prefill, step
from tests.support.number_boxes import enter_and_click, until
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 120_000  # ms: model calls (and the first measurement of the machine's peaks) on a shared 2-core machine


def test_chips_timing_table_and_device_picker(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    prefill(page, "The capital of France is", max_new=8)
    step(page, 1, max_new=8)
    badges = page.locator("#token-chips .ii-chip.ii-gen .ii-decided")
    expect(badges).to_have_count(2, timeout=T)  # greedy: each generated token is the lens's final top-1
    first = page.locator("#token-chips .ii-chip.ii-gen").first
    expect(first).to_have_attribute("title", re.compile(r"decided at layer \d+"))
    layer = int(badges.first.get_attribute("data-layer"))
    assert 0 <= layer <= 29

    open_view(page, "Timing")
    status = page.locator("#op-timing-status")
    # a click that lands while Gradio's number box still commits what was typed can send the value from before
    # (the default step, timed), and a box typed into just after its tab opened can be drawn again with its old
    # value, which every later press would send: the value is typed again with each press until its answer shows
    # (`until` + `enter_and_click`)
    until(page, enter_and_click(page, "#op-step input", "99", "#op-time-btn"), "#op-timing-status",
          "step to time must be -1 or 0..1 (this run's steps), got 99")
    # an emptied number box reaches the handler as None
    until(page, enter_and_click(page, "#op-step input", "", "#op-time-btn"), "#op-timing-status",
          "step to time is empty")
    page.locator("#op-step input").fill("-1")
    page.locator("#op-runs input").fill("2")
    page.locator("#op-time-btn").click()
    expect(status).to_contain_text("timed decode step 1", timeout=T)
    table = page.locator("#op-table")
    for op in ("qkv", "attention", "gate/up", "LM head", "sampling"):
        expect(table.locator(f'tr[data-op="{op}"]')).to_have_count(1)
    expect(page.locator("#op-timing-head")).to_contain_text("measured read bandwidth")
    expect(page.locator("#op-layers tbody tr")).to_have_count(30)
    expect(page.locator("#op-roofline .gtitle")).to_contain_text("Operations on the roofline", timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_op_timing.png"), full_page=True)

    open_view(page, "Models")
    pick = page.locator("#device-pick")
    expect(pick.locator("input")).to_have_value("cpu", timeout=T)
    pick.locator("input").click()
    expect(page.get_by_role("option", name="cpu")).to_be_visible(timeout=T)
    page.keyboard.press("Escape")
    page.locator("#device-load").click()
    expect(page.locator("#device-status-line")).to_contain_text("the model is already on cpu", timeout=T)
