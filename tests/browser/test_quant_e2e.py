"""End-to-end: the Quantization tab in headless chromium over the real default model.

Open the tab, Run int8 on the page's prompt (3 tokens), read the summary and see the plots; move the step
selector; draw a weight histogram; pick int4-g128, whose group does not divide the model's hidden size
(576), and read the one-line error. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import choose, goto, open_view
from tests.support.ui_server import ARTIFACTS


pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 180_000  # ms: quantizing the model and the runs on a shared 2-core machine can be slow


def test_quant_tab_run_step_histogram_and_error(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    page.locator("#prompt textarea").fill("The capital of France is")
    page.locator("#chat-toggle input").uncheck()
    page.locator("#max-new-tokens input").fill("3")
    open_view(page, "Quantization")
    status = page.locator("#quant-status")
    expect(status).to_contain_text("choose a precision", timeout=T)
    expect(page.locator("#quant-memory .js-plotly-plot")).to_be_visible(timeout=T)  # planned bytes, no run needed

    page.locator("#quant-run").click()
    summary = page.locator("#quant-summary")
    expect(summary).to_have_attribute("data-scheme", "int8", timeout=T)
    expect(summary).to_have_attribute("data-positions", "3")
    expect(status).to_contain_text("int8 (KV fp32) compared with fp32 on 3 steps")
    expect(page.locator("#quant-top1")).to_have_text("1.000")  # int8 keeps the greedy tokens on this prompt
    for plot in ("quant-strip", "quant-layers", "quant-dists", "quant-speed"):
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_quant_run.png"), full_page=True)

    box = page.locator("#quant-step input[type='number']")
    box.fill("2")
    box.blur()  # the slider's number box sends `release` when it loses focus
    expect(status).to_contain_text("step 2", timeout=T)
    expect(page.locator("#quant-dists")).to_contain_text("Step 2", timeout=T)

    page.locator("#quant-hist-btn").click()
    expect(status).to_contain_text("int8 error max", timeout=T)
    expect(page.locator("#quant-hist .js-plotly-plot")).to_be_visible(timeout=T)

    choose(page, "quant-scheme", "int4-g128")
    page.locator("#quant-run").click()
    expect(status).to_contain_text("int4 group size 128 does not divide the hidden size 576", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "ui_quant_error.png"), full_page=True)
