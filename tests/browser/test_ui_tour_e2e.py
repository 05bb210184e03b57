"""The learner's path in headless chromium over the real default model, at 1280 px and at a 390 px phone:
the guided tour (first visit, this run's KV numbers equal to the KV view's, closed for good, reopened at a
view's step by its "?"), Play's Speed and an immediate Pause, the keyboard shortcuts (and not while typing),
the system prompt shown, fresh selections on a new run unless pinned, and the precision notes."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import (T, TWO_FRAMES_JS, click_chip, generated, goto, open_settings, open_view, prefill,
                                   step)
from tests.support.number_boxes import click, enter, until
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
WIDTHS = [1280, 390]


def size(page: Page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900 if width > 600 else 844})


def tour_step(page: Page) -> str | None:
    return page.locator("#tour").get_attribute("data-step")


@pytest.mark.parametrize("width", WIDTHS)
def test_tour_opens_on_a_first_visit_names_the_kv_views_numbers_and_stays_closed(page: Page, app_url, width):
    size(page, width)
    goto(page, app_url, tour=True)
    tour = page.locator("#tour")
    expect(tour).to_be_visible(timeout=T)
    expect(tour).to_have_attribute("data-step", "text")
    expect(page.locator("#tour-view .ii-tour-step:visible")).to_have_count(1)
    page.locator("#tour-next").click()
    expect(tour).to_have_attribute("data-step", "tokens")
    page.locator("#tour-back").click()
    expect(tour).to_have_attribute("data-step", "text")
    page.screenshot(path=str(ARTIFACTS / f"tour_first_visit_{width}.png"))

    prefill(page, "Why is the sky blue?", max_new=8)
    step(page, 1, max_new=8)
    n = int(page.locator("#token-count").get_attribute("data-prompt")) + 1  # cached: the prompt and token 1
    open_view(page, "KV cache")
    summary = page.locator("#kv-summary")
    expect(summary).to_have_attribute("data-entries", str(n), timeout=T)
    help_kv = page.locator("#tab-kv .ii-tour-help")
    expect(help_kv).to_have_count(1, timeout=T)
    help_kv.click()  # the view's "?" opens the tour at its step
    expect(tour).to_be_visible()
    expect(tour).to_have_attribute("data-step", "kv")
    kv_bytes = page.locator("#tour-kv-bytes")
    expect(kv_bytes).to_be_visible()
    expect(page.locator("#tour-kv-tokens")).to_have_attribute("data-tokens", str(n))
    total = kv_bytes.get_attribute("data-bytes")
    assert total == summary.get_attribute("data-bytes"), "the tour and the KV view name different cache sizes"
    formula = summary.locator(".ii-formula").text_content()
    assert f"= {int(total):,} bytes" in formula and f"{int(total):,} bytes" in kv_bytes.text_content()
    assert "30 layers × 2 (K and V) × 3 KV heads × 64 numbers × 4 bytes" in page.locator("#tour-view").text_content()
    page.screenshot(path=str(ARTIFACTS / f"tour_kv_{width}.png"))

    step(page, 2, max_new=8)  # a new step's numbers arrive while the tour is open: same step, new numbers
    expect(page.locator("#tour-kv-tokens")).to_have_attribute("data-tokens", str(n + 1), timeout=T)
    expect(tour).to_have_attribute("data-step", "kv")
    expect(page.locator("#tour-view .ii-tour-step:visible")).to_have_count(1)

    page.locator("#tour-close").click()
    expect(tour).to_be_hidden()
    page.reload()
    expect(page.locator("body[data-inspector-loaded]")).to_be_attached(timeout=T)
    # a first visit's tour opens as its text arrives (static/tour.js watches #tour-view): it has arrived, and the
    # watcher has run (in the same task as the change), two frames ago
    expect(page.locator("#tour-view .ii-tour-step")).not_to_have_count(0, timeout=T)
    page.evaluate(TWO_FRAMES_JS)
    expect(tour).to_be_hidden()
    page.locator("#tour-btn").click()  # reopened by its button
    expect(tour).to_be_visible()
    expect(page.locator("#tour-shortcuts")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(tour).to_be_hidden()


@pytest.mark.parametrize("width", WIDTHS)
def test_speed_paces_play_pause_is_immediate_and_the_keys_work(page: Page, app_url, width):
    size(page, width)
    goto(page, app_url)
    prefill(page, "Write a long story about the sea.", max_new=40)
    box = page.locator("#play-speed input")
    box.fill("2")
    box.press("Tab")
    expect(box).to_have_value("2")
    start = generated(page)
    page.locator("#play-btn").click()
    page.wait_for_function(f"Number(document.querySelector('#token-count').dataset.generated) > {start}", timeout=T)
    t0, first = time.monotonic(), generated(page)
    time.sleep(3.0)
    played, elapsed = generated(page) - first, time.monotonic() - t0
    assert 2 <= played <= 2 * elapsed + 2, f"{played} tokens in {elapsed:.1f} s at 2 tok/s"
    clicked = time.monotonic()
    page.locator("#pause-btn").click()
    expect(page.locator("#status-message")).to_have_text("paused", timeout=3000)  # not after the next token's wait
    waited = time.monotonic() - clicked
    stopped = generated(page)
    time.sleep(1.5)
    assert generated(page) == stopped and waited < 3.0

    # a bad speed is named, never clamped (Chromium's number box turns "abc" and "1e309" into an empty one);
    # neighbours give different messages, so each expectation waits for its own value's answer
    for bad, message in (("", "speed (tokens/s) is empty"), ("-5", "must be a number in [1, 20], got -5"),
                         ("abc", "speed (tokens/s) is empty"), ("99", "must be a number in [1, 20], got 99"),
                         ("1e309", "speed (tokens/s) is empty"), ("0", "must be a number in [1, 20], got 0")):
        enter(page, "#play-speed input", bad)
        box.press("Tab")
        until(page, click(page, "#play-btn"), "#status-message", message)
    expect(page.locator("#status-phase")).not_to_contain_text("playing")
    box.fill("4")  # slow enough that the play below is still running when the second Space pauses it
    box.press("Tab")

    # keyboard: → steps, space plays / pauses, neither while typing in a box
    page.locator("#prompt textarea").click()
    before = generated(page)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Space")
    page.wait_for_timeout(1000)
    assert generated(page) == before, "a key typed into the prompt box ran the model"
    page.locator("#model-header").click()  # focus off the boxes
    page.keyboard.press("ArrowRight")
    expect(page.locator("#token-count")).to_have_attribute("data-generated", str(before + 1), timeout=T)
    page.keyboard.press("Space")
    expect(page.locator("#status-phase")).to_contain_text("playing", timeout=T)
    page.keyboard.press("Space")
    expect(page.locator("#status-message")).to_have_text("paused", timeout=T)


@pytest.mark.parametrize("width", WIDTHS)
def test_system_prompt_fresh_selections_and_precision_notes(page: Page, app_url, width):
    size(page, width)
    goto(page, app_url)
    open_settings(page)
    note = page.locator("#system-note")
    expect(note).to_have_attribute("data-system", "default")
    expect(note).to_contain_text("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    page.locator("#system-prompt textarea").fill("Answer in one word.")
    expect(note).to_have_attribute("data-system", "given", timeout=T)
    page.locator("#chat-toggle input").uncheck()
    expect(note).to_have_attribute("data-system", "off", timeout=T)
    page.locator("#chat-toggle input").check()
    page.locator("#system-prompt textarea").fill("")
    expect(note).to_have_attribute("data-system", "default", timeout=T)

    # a new run starts with fresh selections: layer, head and position
    prefill(page, "The capital of France is", max_new=6)
    step(page, 1, max_new=6)
    click_chip(page, 2)
    open_view(page, "Attention")
    for sel, value in (("#attn-layer", "5"), ("#attn-head", "4")):
        page.locator(f"{sel} input[type=number]").fill(value)
        page.locator(f"{sel} input[type=number]").press("Tab")
    expect(page.locator("#attention-info")).to_have_attribute("data-query", "2", timeout=T)
    prefill(page, "Name a color.", max_new=6)
    expect(page.locator("#position input")).to_have_value("-1")
    expect(page.locator("#attn-layer input[type=number]")).to_have_value("0")
    expect(page.locator("#attn-head input[type=number]")).to_have_value("0")
    expect(page.locator(".ii-chip.ii-selected")).to_have_count(0)
    # pinned: they carry over to the next run
    page.locator("#pin-selections input").check()
    click_chip(page, 3)
    prefill(page, "Name an animal.", max_new=6)
    expect(page.locator("#position input")).to_have_value("3")
    expect(page.locator('.ii-chip.ii-selected[data-pos="3"]')).to_have_count(1, timeout=T)
    page.locator("#pin-selections input").uncheck()

    # precision: the weights came from a Q4_1 GGUF
    expect(page.locator("#precision-note")).to_contain_text("rounded values held in float32")
    open_view(page, "Tensor inventory")
    expect(page.locator("#tab-inventory .ii-caption").first).to_contain_text(
        re.compile(r'Q4_1 GGUF, so "float32" here means that file\'s rounded values'))
    open_view(page, "Quantization")
    expect(page.locator("#quant-precision-note")).to_contain_text("rounded values of a Q4_1 GGUF")
