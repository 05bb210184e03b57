"""End-to-end: the app with the real default model in headless Debian chromium.

Prompt -> Prefill -> Step x3 -> sampling preview -> Play/Pause -> Reset, errors in the status line,
two isolated browser contexts, the tensor inventory. A screenshot of each view goes to test-artifacts/.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import (T, click_chip, generated, goto, open_settings, open_tab, prefill, prompt_len, see,
                                   step)
from tests.support.ui_server import ARTIFACTS, TOUR_SEEN_JS  # noqa: F401


pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_prefill_step_sample_play_pause_reset(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    # Step before Prefill: a message, not a crash
    page.locator("#step-btn").click()
    expect(page.locator("#status-message")).to_contain_text("press Prefill first", timeout=T)

    prefill(page, "What is gravity?")
    n = prompt_len(page)
    assert n > 5 and generated(page) == 1
    expect(page.locator(".ii-chip.ii-prompt")).to_have_count(n)
    expect(page.locator(".ii-chip.ii-special").first).to_be_visible()  # <|im_start|> from the chat template
    expect(page.locator("#status-ttft")).to_have_text(re.compile(r"^\d+ ms$"))
    open_tab(page, "KV cache")
    expect(page.locator("#kv-summary")).to_have_attribute("data-entries", str(n), timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_kv_prefill.png"), full_page=True)
    open_tab(page, "Attention")
    expect(page.locator("#attention-info")).to_have_attribute("data-keys", str(n))
    page.screenshot(path=str(ARTIFACTS / "ui_attention_prefill.png"), full_page=True)

    # plots are redrawn in place: the same plotly div across steps (inspector.ui.bundle), its content new each step
    pattern = page.locator("#attn-pattern .js-plotly-plot")
    expect(pattern).to_have_count(1)
    pattern.evaluate("el => { el.dataset.mark = 'kept'; }")
    for k in (1, 2, 3):
        step(page, k)
        expect(page.locator("#attention-info")).to_have_attribute("data-keys", str(n + k))  # row grows
        see(page, "#attn-overview")  # a heavy view out of sight is drawn when it comes into sight (inspector.ui.bundle)
        expect(page.locator("#attn-overview")).to_contain_text(f"query at position {n + k - 1}", timeout=T)
        expect(page.locator("#attn-overview-map img")).to_have_js_property("naturalWidth", n + k)  # a column per key
    expect(pattern).to_have_attribute("data-mark", "kept")
    # the all-heads overview is one image; the mouse over it names the cell (static/app.js)
    image = page.locator("#attn-overview-map img")
    expect(image).to_have_count(1)
    assert image.evaluate("el => el.naturalHeight") == 30 * 9 and image.evaluate("el => el.naturalWidth") == n + 3
    box = image.bounding_box()
    image.hover(position={"x": box["width"] - 2, "y": 1})  # first row (layer 0, head 0), newest key
    expect(page.locator("#attn-overview-map .ii-hm-tip")).to_contain_text(f"L0·H0·kv0 → key {n + 2}:", timeout=T)
    image.hover(position={"x": 1, "y": box["height"] - 1})  # last row, first key
    expect(page.locator("#attn-overview-map .ii-hm-tip")).to_contain_text("L29·H8·kv2 → key 0:", timeout=T)
    assert generated(page) == 4
    expect(page.locator(".ii-chip")).to_have_count(n + 4)
    page.screenshot(path=str(ARTIFACTS / "ui_attention_decode.png"), full_page=True)
    open_tab(page, "KV cache")
    expect(page.locator("#kv-summary")).to_have_attribute("data-entries", str(n + 3))
    page.locator("#kv-recompute-btn").click()  # the same step without the cache, timed
    expect(page.locator("#kv-recompute")).to_contain_text(f"recompute all {n + 3} tokens", timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_kv_decode.png"), full_page=True)

    # the sampling view's chosen token is the newest token in the text
    open_tab(page, "Sampling")
    newest = page.locator(".ii-chip.ii-gen").last.get_attribute("data-id")
    expect(page.locator("#sampling-chosen")).to_have_attribute("data-id", newest)
    expect(page.locator("#sampling-info")).to_have_attribute("data-preview", "0")
    page.screenshot(path=str(ARTIFACTS / "ui_sampling.png"), full_page=True)

    # a sampling slider moves: the distribution is redrawn from stored logits, no new token
    open_settings(page)
    box = page.locator("#temperature input[type=number]")
    box.fill("1.5")
    box.press("Tab")
    expect(page.locator("#sampling-info")).to_have_attribute("data-preview", "1", timeout=T)
    expect(page.locator("#sampling-info")).to_contain_text("temperature 1.5")
    see(page, "#sampling-bars")
    expect(page.locator("#sampling-bars")).to_contain_text("Preview")
    assert generated(page) == 4
    page.screenshot(path=str(ARTIFACTS / "ui_sampling_preview.png"), full_page=True)
    box.fill("0")
    box.press("Tab")
    expect(page.locator("#sampling-info")).to_contain_text("temperature 0 ", timeout=T)

    # keyboard: → steps (focus outside inputs)
    page.locator("#model-header").click()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#status-phase")).to_have_text("decode step 4 (token 5 of 32)", timeout=T)

    # clicking a token chip selects its position
    open_tab(page, "Residual stream")  # its draw may still be on its way: the click's answer is newer
    click_chip(page, 3)
    see(page, "#resid-position")
    expect(page.locator("#resid-position")).to_contain_text(re.compile(r"Position 3 "), timeout=T)
    expect(page.locator('.ii-chip.ii-selected[data-pos="3"]')).to_have_count(1)
    heat = page.locator("#resid-heat-map img")  # an image; hover names layer, position and the norm
    heat.hover(position={"x": 1, "y": 1})
    expect(page.locator("#resid-heat-map .ii-hm-tip")).to_contain_text(re.compile(r"^layer 29 → pos 0:.*‖x‖ \d+\.\d$"),
                                                                       timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_residual.png"), full_page=True)
    click_chip(page, 3, "-1")  # again: back to the newest position

    open_tab(page, "Timing")
    see(page, "#timing-chart")
    expect(page.locator("#timing-chart")).to_contain_text("TTFT")
    page.screenshot(path=str(ARTIFACTS / "ui_timing.png"), full_page=True)

    # Play streams steps; Pause stops them
    before = generated(page)
    page.locator("#play-btn").click()
    page.wait_for_function(f"Number(document.querySelector('#token-count').dataset.generated) >= {before + 2}",
                           timeout=T)
    page.locator("#pause-btn").click()
    expect(page.locator("#status-message")).to_have_text("paused", timeout=T)
    grown = generated(page)
    assert grown >= before + 2
    time.sleep(1.5)  # no timing assertion: only that nothing more arrives after the pause
    assert generated(page) == grown
    page.screenshot(path=str(ARTIFACTS / "ui_tokens_after_play.png"), full_page=True)

    page.locator("#reset-btn").click()
    expect(page.locator("#status-phase")).to_have_text("idle", timeout=T)
    expect(page.locator(".ii-chip")).to_have_count(0)

    # empty prompt -> clear error
    page.locator("#prompt textarea").fill("   ")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-message")).to_contain_text("prompt is empty", timeout=T)


def test_bad_settings_are_reported(page: Page, app_url):
    goto(page, app_url)
    page.locator("#prompt textarea").fill("Hello")
    page.locator("#max-new-tokens input").fill("0")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-message")).to_contain_text("max new tokens must be > 0", timeout=T)
    page.locator("#max-new-tokens input").fill("4")
    page.locator("#max-new-tokens input").press("Tab")  # left, as a person leaves a box: its change lands first
    open_settings(page)
    page.locator("#seed input").fill("-3")
    page.locator("#seed input").press("Tab")
    # A click that lands while Gradio's number box is still committing what was typed can send the value
    # from before (the page then names max new tokens again): press again, as a person would, up to 3 times.
    for attempt in range(3):
        page.locator("#prefill-btn").click()
        try:
            expect(page.locator("#status-message")).to_contain_text("seed must be a whole number >= 0, got -3",
                                                                     timeout=T // 3)
            break
        except AssertionError:
            if attempt == 2:
                raise
    page.locator("#seed input").fill("0")
    page.locator("#seed input").press("Tab")
    page.locator("#top-p input[type=number]").fill("0")
    page.locator("#top-p input[type=number]").press("Tab")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-message")).to_contain_text("top-p must be a number in (0, 1] (1 = off), got 0", timeout=T)
    page.locator("#top-p input[type=number]").fill("1")
    page.locator("#top-p input[type=number]").press("Tab")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)
    page.locator("#play-btn").click()
    page.locator("#play-btn").click()  # Play while playing: a message (or it already finished), never a crash
    expect(page.locator("#status-phase")).to_have_text(re.compile("finished: (max tokens|EOS)"), timeout=T)


def test_play_at_max_speed_then_pause_shows_the_step_it_stopped_at(page: Page, app_url):
    """At max speed the page gets fewer updates than steps, and the plots fewer still (inspector.ui.play); once
    paused, the open view shows the step Play stopped at, as it would after a Step there."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    # room for many more steps than the page shows before Pause: at max speed the steps do not wait for the page, and
    # with 64 a loaded machine's Play finished before the Pause arrived
    prefill(page, "Write a long story about a dragon who learns to bake bread.", max_new=200)
    n = prompt_len(page)
    open_tab(page, "KV cache")
    page.locator("#play-max input").check()
    page.locator("#play-btn").click()
    page.wait_for_function("Number(document.querySelector('#token-count').dataset.generated) >= 8", timeout=T)
    page.locator("#pause-btn").click()
    expect(page.locator("#status-message")).to_have_text("paused", timeout=T)
    g = generated(page)
    assert g >= 8
    expect(page.locator("#kv-summary")).to_have_attribute("data-entries", str(n + g - 1), timeout=T)
    # the growth chart: one point per forward (the prefill's, then one per decode step), the last one Play's
    page.wait_for_function(f"document.querySelector('#kv-growth .js-plotly-plot').data[0].x.length === {g}",
                           timeout=T)
    time.sleep(1.0)  # nothing more arrives after the pause
    assert generated(page) == g


def test_two_browser_contexts_are_isolated(browser, app_url, app_demo):
    a, b = browser.new_context(), browser.new_context()
    pa, pb = a.new_page(), b.new_page()
    goto(pa, app_url)
    goto(pb, app_url)
    prefill(pa, "The capital of France is")
    prefill(pb, "def fibonacci(n):")
    ids_a = pa.locator(".ii-chip").evaluate_all("cs => cs.map(c => c.dataset.id)")
    ids_b = pb.locator(".ii-chip").evaluate_all("cs => cs.map(c => c.dataset.id)")
    assert ids_a != ids_b
    step(pa, 1)
    assert generated(pa) == 2 and generated(pb) == 1
    pb.reload()
    expect(pb.locator("#status-phase")).to_have_text("idle", timeout=T)  # a new page is a new session
    assert generated(pa) == 2
    a.close()
    b.close()


def plot_fills_its_box(page: Page, elem_id: str, min_width: int) -> None:
    """The plotly figure in #elem_id is laid out at the width its div is shown at."""
    page.wait_for_function(f"(() => {{ const d = document.querySelector('#{elem_id} .js-plotly-plot');"
                           f" return d && d.clientWidth > {min_width} && Math.abs(d._fullLayout.width - d.clientWidth) < 1; }})()",
                           timeout=T)


def test_plots_fit_their_box_when_a_closed_tab_opens_and_the_window_resizes(page: Page, app_url):
    """Before any prefill, opening a tab redraws nothing: its hint figure, drawn while the tab was closed, is
    laid out again once shown; and again when the window gets narrower."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    open_tab(page, "Timing")
    expect(page.locator("#timing-chart")).to_contain_text("Type a prompt")
    plot_fills_its_box(page, "timing-chart", 700)  # the views take the wider column, beside the tokens
    wide = page.evaluate("document.querySelector('#timing-chart .js-plotly-plot').clientWidth")
    page.set_viewport_size({"width": 900, "height": 1000})
    plot_fills_its_box(page, "timing-chart", 350)
    assert page.evaluate("document.querySelector('#timing-chart .js-plotly-plot').clientWidth") < wide


def test_inventory_lists_272_tensors(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    open_tab(page, "Tensor inventory")
    expect(page.locator("#inventory-table tbody tr")).to_have_count(272, timeout=T)
    expect(page.locator("#inventory-count")).to_have_text("272")
    expect(page.locator("#inventory")).to_contain_text("tied")
    page.locator('#inventory-table th[data-col="4"]').click()  # sort by bytes, ascending
    page.locator('#inventory-table th[data-col="4"]').click()  # descending: the embedding first
    expect(page.locator("#inventory-table tbody tr").first).to_contain_text("embed_tokens")
    page.locator("#inv-layer input").click()
    page.get_by_role("option", name="7", exact=True).click()
    expect(page.locator("#inventory-table tr.ii-hit")).to_have_count(9, timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_inventory.png"), full_page=True)


def test_play_pressed_during_the_first_prefill_starts_when_it_finishes(page: Page, app_url):
    """The page has its session id from load, so Play clicked while the first prefill runs finds it, says
    so, and plays once the prefill is done."""
    goto(page, app_url)
    page.locator("#prompt textarea").fill("Tell me a long story about the sea. " * 12)
    page.locator("#max-new-tokens input").fill("6")
    page.locator("#prefill-btn").click()
    page.locator("#play-btn").click()
    expect(page.locator("#status-phase")).to_contain_text("finished", timeout=T)
    assert generated(page) == 6
    expect(page.locator("#status-message.ii-error")).to_have_count(0)
