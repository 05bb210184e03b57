"""End-to-end: the Speculative tab in headless chromium over the real default model.

Open the tab, Round before Start (one line), type a prompt that repeats itself, Start, step one Round (its
drafts with q and p appear, the KV plot draws), Play to the end: the stats show the acceptance rate and a
measured speedup over plain decoding; an empty prompt is refused in one line.
Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 90_000  # ms: model calls on a shared 2-core machine can be slow; expect() retries until then
PROMPT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n# the same functions again:\n"
          "def add(a, b):")


def test_speculative_tab_start_round_play(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    open_view(page, "Speculative")
    status = page.locator("#speculative-status")
    expect(status).to_contain_text("press Start", timeout=T)

    page.locator("#speculative-round").click()  # nothing started: one line, no crash
    expect(status).to_contain_text("nothing to run yet: press Start first", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)

    chat = page.locator("#chat-toggle input")
    if chat.is_checked():
        chat.uncheck()  # the code prompt is continued as raw text
    page.locator("#prompt textarea").fill(PROMPT)
    page.locator("#max-new-tokens input").fill("20")
    page.locator("#speculative-start").click()
    expect(status).to_contain_text("prefill done", timeout=T)
    expect(page.locator("#spec-text")).to_have_attribute("data-generated", "1", timeout=T)

    page.locator("#speculative-round").click()
    expect(status).to_contain_text("round 1: kept", timeout=T)
    expect(page.locator("#spec-rounds")).to_have_attribute("data-rounds", "1", timeout=T)
    first = page.locator(".ii-spec-round").first
    expect(first.locator(".ii-spec-chip").first).to_contain_text("q 1.00 · p")  # prompt lookup: q is one-hot
    expect(page.locator("#speculative-kv .js-plotly-plot")).to_be_visible(timeout=T)
    page.screenshot(path=str(ARTIFACTS / "ui_speculative_round.png"), full_page=True)

    page.locator("#speculative-play").click()
    expect(page.locator("#spec-text")).to_have_attribute("data-finished", "max_tokens", timeout=T)
    stats = page.locator("#spec-stats")
    expect(stats).to_have_attribute("data-speedup", re.compile(r"^\d+\.\d+$"), timeout=T)
    expect(stats).to_contain_text("acceptance rate")
    expect(stats).to_contain_text("plain greedy decode, same prompt and length")
    assert float(stats.get_attribute("data-tokens-per-forward")) > 1.5  # the code repeats: drafts are kept
    page.screenshot(path=str(ARTIFACTS / "ui_speculative_done.png"), full_page=True)

    page.locator("#prompt textarea").fill("")
    page.locator("#speculative-start").click()
    expect(status).to_contain_text("the prompt is empty", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)
