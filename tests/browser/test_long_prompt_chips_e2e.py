"""A long prompt's token chips travel once (inspector/ui/bundle_parts.py PromptParts): the page puts them back in
place on every update, so the chips, their selection and the new tokens show as with a short prompt."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from inspector.ui.bundle_parts import PART_MIN_ITEMS
from tests.support.browser import T, click_chip, generated, goto, prefill, prompt_len, step

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PROMPT = " ".join(f"Lantern {i} glows by the old gate." for i in range(40))  # about 400 tokens


def test_long_prompt_chips_show_select_and_grow(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    prefill(page, PROMPT)
    n = prompt_len(page)
    assert n >= PART_MIN_ITEMS  # its chips travel as a part
    expect(page.locator(".ii-chip.ii-prompt")).to_have_count(n)
    parts = page.evaluate("[...window.iiParts.values()].map((p) => p.length)")
    assert len(parts) >= 1 and max(parts) > 0
    words = page.locator(".ii-chip.ii-prompt .ii-piece").all_text_contents()
    for k in (1, 2):
        step(page, k)
        expect(page.locator(".ii-chip")).to_have_count(n + k + 1)
        assert generated(page) == k + 1
    assert page.locator(".ii-chip.ii-prompt .ii-piece").all_text_contents() == words  # the same prompt chips
    click_chip(page, 7)  # a prompt chip selected: its outline comes back with the server's chips
    expect(page.locator('.ii-chip.ii-selected[data-pos="7"]')).to_have_count(1)
    step(page, 3)
    expect(page.locator(".ii-chip")).to_have_count(n + 4)
    expect(page.locator('.ii-chip.ii-selected[data-pos="7"]')).to_have_count(1)
    expect(page.locator(".ii-chip.ii-selected")).to_have_count(1)
    assert page.locator(".ii-chip.ii-prompt .ii-piece").all_text_contents() == words
    expect(page.locator("#token-count")).to_have_text(re.compile(rf"^{n} prompt tokens · 4 generated$"))
