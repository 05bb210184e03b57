"""End-to-end: the Training tab in headless chromium over the real default model, at 1280 px and on a
390 px-wide phone.

After a prefill and one step, opening Training fills its text box with the run's text; Run shows the
per-token loss colours, the perplexity, the gradient-norm charts and the memory table (measured and
formula labels) inside the page's width; a text too long gives one line. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view, prefill, step
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 180_000  # ms: a forward and a backward on a shared 2-core machine can be slow
PROMPT = "The capital of France is"


def run_and_check(page: Page, width: int) -> None:
    status = page.locator("#training-status")
    page.locator("#training-run").click()
    expect(status).to_contain_text("tokens teacher-forced, one backward pass", timeout=T)
    perplexity = page.locator("#training-perplexity")
    expect(perplexity).to_be_visible(timeout=T)
    assert float(perplexity.inner_text()) > 1.0
    chips = page.locator("#training-tokens-chips .ii-loss-tok[data-loss]")
    expect(chips.first).to_be_visible(timeout=T)
    assert chips.count() >= 4
    colours = {c.get_attribute("style").split("background:")[1].split(";")[0] for c in chips.all()}
    assert len(colours) > 1  # tokens the model predicted well and badly differ in colour
    for plot, title in (("training-layer-norms", "Gradient norm per layer"),
                        ("training-weight-norms", "Gradient norm per weight"),
                        ("training-memory-figure", "Memory: inference vs one training step")):
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible(timeout=T)
        expect(page.locator(f"#{plot} .gtitle")).to_have_text(title, timeout=T)
    table = page.locator("#training-memory")
    expect(table).to_contain_text("activations kept for backward")
    expect(table.locator("[data-how='measured']")).to_have_count(5)
    expect(table.locator("[data-how='formula']")).to_have_count(1)
    box = table.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1  # fits, or scrolls inside
    page.screenshot(path=str(ARTIFACTS / f"ui_training_{width}.png"), full_page=True)


def test_training_tab_after_a_run_at_1280(page: Page, app_url):  # noqa: F811
    page.set_viewport_size({"width": 1280, "height": 1000})
    goto(page, app_url)
    page.locator("#chat-toggle input").uncheck()
    prefill(page, PROMPT, max_new=4)
    step(page, 1, max_new=4)
    open_view(page, "Training")
    text = page.locator("#training-text textarea")
    # the run's text: the prompt and the two tokens so far (the prefill's and step 1's)
    expect(text).to_have_value(re.compile("^" + re.escape(PROMPT) + ".+", re.S), timeout=T)
    run_and_check(page, 1280)

    text.fill("word " * 2000)  # refused by its length, before any model work
    page.locator("#training-run").click()
    expect(page.locator("#training-status [data-error='1']")).to_contain_text(
        "the text is 10000 characters; this view teacher-forces at most 256 tokens", timeout=T)


def test_training_tab_on_a_phone(page: Page, app_url):  # noqa: F811
    page.set_viewport_size({"width": 390, "height": 844})
    goto(page, app_url)
    open_view(page, "Training")
    expect(page.locator("#training-text textarea")).to_be_visible(timeout=T)
    page.locator("#training-text textarea").fill("Paris is the capital of France. Rome is the capital of Italy.")
    run_and_check(page, 390)
