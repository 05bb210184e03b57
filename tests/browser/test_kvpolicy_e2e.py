"""End-to-end: the KV policies tab and the KV cache view's policy control in headless chromium over the real
default model.

Open the tab, Run H2O with a budget of 8 on the page's prompt (4 tokens), read the summary and see the map
and the KL bars; move the layer selector; step through FlashAttention's tiles; a budget of 0 gives one line.
Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view, prefill, step
from tests.support.number_boxes import enter_and_click, until
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 180_000  # ms: two generations side by side on a shared 2-core machine can be slow


def test_kvpolicy_tab_run_select_tiles_and_error(page: Page, app_url):  # noqa: F811
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    page.locator("#prompt textarea").fill("The capital of France is Paris, and the capital of Italy is")
    page.locator("#chat-toggle input").uncheck()
    page.locator("#max-new-tokens input").fill("4")
    open_view(page, "KV policies")
    status = page.locator("#kvpolicy-status")
    expect(status).to_contain_text("choose a policy", timeout=T)
    page.locator("#kvpolicy-budget input").fill("8")
    page.locator("#kvpolicy-run").click()
    expect(status).to_contain_text("h2o, budget 8: 4 tokens generated with the full cache alongside", timeout=T)
    expect(page.locator("#kvpolicy-summary-text")).to_contain_text("top-1 agreement")
    for plot in ("kvpolicy-map", "kvpolicy-metrics"):
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_kvpolicy_run.png"), full_page=True)

    box = page.locator("#kvpolicy-layer input[type='number']")
    box.fill("5")
    box.blur()  # the slider's number box sends `release` when it loses focus
    expect(status).to_contain_text("layer 5, KV head 0", timeout=T)
    expect(page.locator("#kvpolicy-map")).to_contain_text("Layer 5, KV head 0", timeout=T)

    page.get_by_text("FlashAttention tiles: one head of the prompt's prefill").click()
    page.locator("#kvpolicy-flash-run").click()
    expect(page.locator("#kvpolicy-flash-text")).to_contain_text("By formula (not measured)", timeout=T)
    expect(page.locator("#kvpolicy-flash-tile-fig .js-plotly-plot")).to_be_visible(timeout=T)

    page.locator("#kvpolicy-budget input").fill("0")
    page.locator("#kvpolicy-run").click()
    expect(status).to_contain_text("budget must be a whole number >= 1", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)


def test_kv_view_generates_under_a_policy_and_compares(page: Page, app_url):  # noqa: F811
    """The KV cache view's policy control: H2O with a budget of 8 chosen before Prefill, then Prefill and two
    steps generate under it; pressing the button again compares the run's 3 tokens with the full cache (the
    map, the per-token KL, the bytes saved); the layer selector redraws; a budget of 0 gives one line."""
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    page.locator("#chat-toggle input").uncheck()
    open_view(page, "KV cache")
    status = page.locator("#kv-policy-status")
    expect(status).to_contain_text("the page generates with the full cache", timeout=T)
    # typed just after the view opened, the box can be drawn again with its old value (32) before the press
    # takes it: typed again with each press until the status names the budget typed (tests/support/number_boxes.py)
    until(page, enter_and_click(page, "#kv-policy-budget input", "8", "#kv-policy-apply"), "#kv-policy-status",
          "h2o, budget 8: generation runs under it from the next Prefill")
    prefill(page, "The capital of France is Paris, and the capital of Italy is", 8)
    step(page, 1, 8)
    step(page, 2, 8)
    page.locator("#kv-policy-apply").click()
    expect(status).to_contain_text("h2o, budget 8: 3 tokens of this run compared with the full cache", timeout=T)
    expect(page.locator("#kv-policy-summary-text")).to_contain_text("would save", timeout=T)
    for plot in ("kv-policy-map", "kv-policy-metrics"):
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_kv_view_policy.png"), full_page=True)

    box = page.locator("#kv-policy-layer input[type='number']")
    box.fill("5")
    box.blur()  # the slider's number box sends `release` when it loses focus
    expect(status).to_contain_text("layer 5, KV head 0", timeout=T)
    expect(page.locator("#kv-policy-map")).to_contain_text("Layer 5, KV head 0", timeout=T)

    page.locator("#kv-policy-budget input").fill("0")
    page.locator("#kv-policy-apply").click()
    expect(status).to_contain_text("budget must be a whole number >= 1", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)
