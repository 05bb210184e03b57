"""The page as a visitor meets it, in headless chromium over the real default model: the first
screen at 1400x900, no horizontal overflow at 390 px, the pipeline strip, branching and switching, trace
files saved and reopened with equal views, and links that reproduce a run."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import (T, chip_ids, generated, goto, open_settings, open_view, prefill, prompt_len,
                                   save_trace_as, see, step, upload, views_settled)
from tests.support.ui_server import ARTIFACTS


pytestmark = [pytest.mark.slow, pytest.mark.browser]
VIEWS = ["Residual stream", "Attention", "KV cache", "Sampling", "Tensor inventory", "Timing"]


def bottom(page: Page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not laid out"
    return box["y"] + box["height"]


def test_first_screen_shows_tokens_and_the_main_plot(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 900})
    goto(page, app_url)
    # the page-load chain's events went through static/queue_stream.js (a head script: in the page's HTML, there
    # before Gradio's first join), and each had its answer
    assert page.evaluate("window.iiQueueStream.joined") >= 1
    assert page.evaluate("window.iiQueueStream.unanswered.size") == 0
    # static/loading_timer.js (a head script too: there before Gradio's modules) ended the frame loop of Gradio's
    # loading screen
    assert page.evaluate("window.iiLoadingTimer") == {"tied": 1, "ended": 1}
    expect(page.locator("#pipeline-strip")).to_have_attribute("data-kind", "idle")
    prefill(page, "Why is the sky blue?")
    expect(page.locator("#resid-heatmap img")).to_be_visible(timeout=T)
    page.evaluate("window.scrollTo(0, 0)")
    strip = page.locator("#pipeline-strip")
    expect(strip).to_have_attribute("data-kind", "prefill")
    n = int(page.locator("#token-count").get_attribute("data-prompt"))
    expect(strip).to_have_attribute("data-tokens", str(n))
    expect(strip.locator('[data-stage="embed"]')).to_contain_text(f"{n} × 576")
    expect(strip.locator('[data-stage="logits"]')).to_contain_text("49,152 logits")
    assert page.evaluate("window.scrollY") == 0
    assert bottom(page, ".ii-chip.ii-gen") <= 900, "the tokens are below the first screen"
    assert bottom(page, "#resid-heatmap img") <= 900, "the residual heatmap is below the first screen"
    page.screenshot(path=str(ARTIFACTS / "page_first_screen.png"))

    step(page, 1)
    expect(strip).to_have_attribute("data-kind", "decode")
    expect(strip.locator('[data-stage="tokens"]')).to_contain_text(f"1 token · position {n}")
    strip.locator('[data-stage="logits"]').click()  # a stage opens its view
    expect(page.locator("#sampling-info")).to_be_visible(timeout=T)
    page.evaluate("window.scrollTo(0, 0)")
    assert bottom(page, "#sampling-bars .js-plotly-plot") <= 900


def test_a_failed_load_of_plotly_js_is_tried_again_and_never_blanks_the_page(page: Page, app_url):
    # plotly.min.js fails to load until `failing` is cleared (a dropped connection, a server restarting): the
    # status line, the chips and the text do not wait for it, each plot says so, and a later try draws the plots
    failing, tries = [True], []

    def route(request_route) -> None:
        tries.append(failing[0])
        if failing[0]:
            request_route.abort()
        else:
            request_route.continue_()

    page.route("**/plotly.min.js", route)
    page.set_viewport_size({"width": 1400, "height": 900})
    goto(page, app_url)
    plot = page.locator("#resid-position .ii-plot")
    expect(plot).to_have_text("The plotting library (plotly.js) did not load; trying again.", timeout=T)
    prefill(page, "Why is the sky blue?")
    expect(page.locator(".ii-chip").first).to_be_visible()
    expect(plot).to_have_attribute("data-plotly-wait", "1")
    failing[0] = False
    see(page, "#resid-position")  # below the fold: drawn when it comes into sight (inspector.ui.bundle)
    expect(plot.locator(".main-svg").first).to_be_attached(timeout=T)
    expect(plot).not_to_have_attribute("data-plotly-wait", "1")
    expect(plot).not_to_contain_text("did not load")
    assert tries[0] and tries[-1] is False and tries.count(False) == 1, tries  # tried again until it loaded, once


def test_a_plot_out_of_sight_is_drawn_when_it_comes_into_sight(page: Page, app_url):
    """A Step does not redraw a plot below the fold (inspector.ui.bundle: a lazy slot out of sight is marked
    stale); scrolled into sight, it shows the newest step, and Steps in sight redraw it at once."""
    page.set_viewport_size({"width": 1400, "height": 700})
    goto(page, app_url)
    prefill(page, "What is gravity?")
    n = prompt_len(page)
    chart, slot = page.locator("#resid-position"), page.locator("#resid-position .ii-plot")
    see(page, "#resid-position")
    expect(chart).to_contain_text(f"Position {n - 1} ", timeout=T)  # the newest position after the prefill
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("document.querySelector('#resid-position').getBoundingClientRect().top > innerHeight")
    step(page, 1)
    views_settled(page)
    expect(slot).to_have_attribute("data-stale", "1", timeout=T)
    expect(chart).to_contain_text(f"Position {n - 1} ")  # still the prefill's: not drawn out of sight
    see(page, "#resid-position")
    expect(slot).not_to_have_attribute("data-stale", "1")
    expect(chart).to_contain_text(f"Position {n} ")
    page.evaluate("document.getElementById('step-btn').click()")  # a click that leaves the page where it is
    expect(page.locator("#status-phase")).to_have_text("decode step 2 (token 3 of 32)", timeout=T)
    expect(chart).to_contain_text(f"Position {n + 1} ", timeout=T)  # in sight: drawn with the Step
    expect(slot).not_to_have_attribute("data-stale", "1")

def test_a_phone_sized_screen_has_no_horizontal_overflow(page: Page, app_url):
    page.set_viewport_size({"width": 390, "height": 844})
    goto(page, app_url)
    prefill(page, "The capital of France is", max_new=8)
    step(page, 1, max_new=8)
    for label in VIEWS:
        open_view(page, label)
        if label == "Tensor inventory":  # its table is no view slot: drawn when the tab mounts
            expect(page.locator("#inventory-table")).to_be_visible(timeout=T)
        views_settled(page)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{label}: the page is {width} px wide at 390 px"
    expect(page.locator("#step-btn")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "page_390.png"), full_page=True)


def test_branch_then_switch_back(page: Page, app_url):
    goto(page, app_url)
    prefill(page, "The capital of France is", max_new=12)
    for k in (1, 2, 3):
        step(page, k, max_new=12)
    original = chip_ids(page)
    open_view(page, "Sampling")
    other = page.locator(".ii-branch-force:not(.ii-chosen)").first
    forced = other.get_attribute("data-id")
    other.click()
    expect(page.locator("#status-message")).to_contain_text("branched: step 3", timeout=T)
    expect(page.locator("#branch-tree")).to_have_attribute("data-branches", "2")
    expect(page.locator(".ii-chip.ii-gen").last).to_have_attribute("data-id", forced)
    step(page, 4, max_new=12)  # the run continues from the forced token
    branched = chip_ids(page)
    assert branched[:len(original) - 1] == original[:-1] and branched[len(original) - 1] == forced

    page.locator('.ii-branch-node[data-branch="0"]').click()
    expect(page.locator("#status-message")).to_contain_text("switched to branch #0", timeout=T)
    expect(page.locator("#branch-tree")).to_have_attribute("data-current", "0")
    assert chip_ids(page) == original
    page.locator('.ii-branch-node[data-branch="1"]').click()
    expect(page.locator("#branch-tree")).to_have_attribute("data-current", "1", timeout=T)
    assert chip_ids(page) == branched
    page.screenshot(path=str(ARTIFACTS / "page_branches.png"), full_page=True)


def test_save_a_trace_and_open_it_in_another_browser(browser, app_url, tmp_path):
    a, b = browser.new_context(), browser.new_context()
    pa, pb = a.new_page(), b.new_page()
    goto(pa, app_url)
    prefill(pa, "Write a haiku about the sea.", max_new=8)
    step(pa, 1, max_new=8)
    step(pa, 2, max_new=8)
    path = save_trace_as(pa, tmp_path / "run.safetensors")

    goto(pb, app_url)
    upload(pb, str(path))
    expect(pb.locator("#status-message")).to_contain_text("opened", timeout=T)
    assert chip_ids(pb) == chip_ids(pa)
    for sel in ("#generated-text", "#status-phase", "#pipeline-strip"):
        assert pb.locator(sel).inner_text() == pa.locator(sel).inner_text(), sel
    for label, sel in [("Sampling", "#sampling-info"), ("KV cache", "#kv-summary"), ("Attention", "#attention-info")]:
        open_view(pa, label)
        open_view(pb, label)
        expect(pb.locator(sel)).to_be_visible(timeout=T)
        expect(pa.locator(sel)).to_be_visible(timeout=T)
        assert pb.locator(sel).inner_text() == pa.locator(sel).inner_text(), label
    step(pb, 3, max_new=8)  # the page's model recorded it: it steps on
    upload(pb, {"name": "bad.safetensors", "mimeType": "application/octet-stream", "buffer": path.read_bytes()[:100]})
    expect(pb.locator("#status-message")).to_contain_text(re.compile("truncated|corrupt|not a"), timeout=T)
    assert generated(pb) == 4  # the session survives a bad file
    a.close()
    b.close()


def test_a_link_reproduces_a_run(browser, app_url):
    query = {"prompt": "Tell me a fact about owls.", "chat": "1", "temperature": "0.9", "top_p": "0.95",
             "seed": "7", "max_new": "10", "steps": "3"}
    a, b = browser.new_context(), browser.new_context()
    pa, pb = a.new_page(), b.new_page()
    pa.goto(f"{app_url}?{urlencode(query)}", timeout=T)
    expect(pa.locator("#status-phase")).to_have_text("decode step 3 (token 4 of 10)", timeout=T)
    expect(pa.locator("#prompt textarea")).to_have_value(query["prompt"])
    open_settings(pa)
    expect(pa.locator("#temperature input[type=number]")).to_have_value("0.9")
    ids = chip_ids(pa)

    pa.locator("#link-btn").click()  # the page's own link to this run, opened in another browser
    expect(pa.locator("#run-link textarea")).to_have_value(re.compile(r"\?prompt="), timeout=T)
    url = pa.locator("#run-link textarea").input_value()
    pb.goto(url, timeout=T)
    expect(pb.locator("#status-phase")).to_have_text("decode step 3 (token 4 of 10)", timeout=T)
    assert chip_ids(pb) == ids

    pb.goto(f"{app_url}?prompt=hi&top_k=lots", timeout=T)
    expect(pb.locator("#status-message")).to_contain_text("link parameter top_k", timeout=T)
    a.close()
    b.close()
