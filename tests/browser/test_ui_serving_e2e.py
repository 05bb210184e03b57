"""End-to-end: the Serving tab in headless chromium over the real default model.

Open the tab, queue two requests (one arriving later), Step, Play to the end, read the summary and the
request table; a bad request box gives one line in the status; the memory calculator redraws when a
slider moves; the prefix-caching comparison serves one workload four ways. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view, views_settled
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 90_000  # ms: model calls on a shared 2-core machine can be slow; expect() retries until then


def test_serving_tab_load_step_play(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    open_view(page, "Serving")
    status = page.locator("#serving-status")
    expect(status).to_contain_text("press Load", timeout=T)

    page.locator("#serving-step").click()  # nothing queued yet: one line, no crash
    expect(status).to_contain_text("nothing queued: press Load first", timeout=T)

    page.locator("#serving-requests textarea").fill("0 | 4 | The capital of France is\n2 | 3 | Hello")
    page.locator("#serving-load").click()
    expect(status).to_contain_text("queued 2 sequences", timeout=T)
    page.locator("#serving-step").click()
    expect(status).to_contain_text("step 0: #0 prefill", timeout=T)
    summary = page.locator("#serving-summary")
    expect(summary).to_have_attribute("data-steps", "1", timeout=T)
    expect(page.locator("#serving-grid .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_serving_step.png"), full_page=True)

    page.locator("#serving-play").click()
    expect(status).to_contain_text("all done", timeout=T)
    expect(summary).to_have_attribute("data-finished", "2", timeout=T)
    expect(summary).to_have_attribute("data-tokens", "7")
    expect(summary).to_contain_text(re.compile(r"tokens/s aggregate"))
    expect(page.locator('#serving-table tr[data-status="finished"]')).to_have_count(2)
    expect(page.locator("#serving-roofline .js-plotly-plot")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "ui_serving_done.png"), full_page=True)

    page.locator("#serving-requests textarea").fill("")
    page.locator("#serving-load").click()
    expect(status).to_contain_text("no requests", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)

    info = page.locator("#serving-mem-info")
    expect(info).to_contain_text("requests of 4096 tokens fit in 80 GiB", timeout=T)
    slider = page.locator("#serving-mem-context input[type='number']")
    slider.fill("8192")
    slider.blur()  # the slider's number box sends `release` when it loses focus
    expect(info).to_contain_text("requests of 8192 tokens fit in 80 GiB", timeout=T)


def test_serving_tab_fits_a_phone_sized_screen(page: Page, app_url):
    page.set_viewport_size({"width": 390, "height": 844})
    goto(page, app_url)
    open_view(page, "Serving")  # on a narrow screen it may sit in Gradio's "More tabs" menu
    page.locator("#serving-requests textarea").fill("0 | 3 | The capital of France is a city")
    page.locator("#serving-load").click()
    expect(page.locator("#serving-status")).to_contain_text("queued 1 sequence", timeout=T)
    page.locator("#serving-step").click()
    expect(page.locator("#serving-summary")).to_have_attribute("data-steps", "1", timeout=T)
    for plot in ("serving-grid", "serving-timeline", "serving-tokens", "serving-roofline"):  # the step's figures drawn
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible(timeout=T)
        expect(page.locator(f"#{plot}")).not_to_contain_text("press Load", timeout=T)
    views_settled(page)
    width = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=str(ARTIFACTS / "ui_serving_390.png"), full_page=True)
    assert width <= 390, f"the Serving tab is {width} px wide at 390 px"


def test_serving_tab_compares_prefix_caching_and_chunked_prefill(page: Page, app_url):
    """The comparison panel: 2 requests (the fewest it takes) sharing the library system prompt, 2 new tokens
    each, served four ways; the table has the four configurations, the same outputs, and hits with prefix
    caching (the second request, arriving at step 2, finds the first one's prefix), none without; a request
    count of 1 gives one line."""
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    open_view(page, "Serving")
    page.get_by_text("Prefix caching and chunked prefill: one workload served four ways").click()
    status = page.locator("#serving-prefix-status")
    expect(status).to_contain_text("press Compare", timeout=T)

    def compare() -> None:
        page.locator("#serving-prefix-requests input").fill("2")
        page.locator("#serving-prefix-new input").fill("2")
        page.locator("#serving-prefix-run").click()

    compare()
    expect(status).to_contain_text(re.compile(r"\d+ requests of"), timeout=4 * T)
    if not re.search(r"\b2 requests of", status.text_content()):
        # the panel, just unfolded, drew a box again with its default after it was typed into (seen once in a
        # full run on a loaded machine: 6 requests served): typed and pressed again, the run must be of 2
        compare()
    expect(status).to_contain_text(re.compile(r"\b2 requests of"), timeout=4 * T)
    expect(status).to_contain_text("served 4 ways")
    rows = page.locator("#serving-prefix-table tr[data-config]")
    expect(rows).to_have_count(4)
    expect(page.locator("#serving-prefix-table")).not_to_contain_text("differ")
    expect(page.locator("#serving-prefix-table tr[data-config='plain'] td").nth(4)).to_have_text("0%")
    expect(page.locator("#serving-prefix-table tr[data-config='prefix caching'] td").nth(4)).not_to_have_text("0%")
    expect(page.locator("#serving-prefix-fig .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_serving_prefix.png"), full_page=True)

    page.locator("#serving-prefix-requests input").fill("1")
    page.locator("#serving-prefix-run").click()
    expect(status).to_contain_text("requests must be a whole number from 2 to 12", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)
