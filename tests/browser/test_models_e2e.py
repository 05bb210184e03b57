"""End-to-end: the Models tab in headless chromium over the real default model, with the real Gemma 3 270M
as the second model (fetched and converted on first use, as `--model gemma3-270m`).

The family card of the default model (a Llama: nothing added, every layer global); Compare with an empty
prompt is one line; with a prompt, both models' tokenizations and next-token distributions side by side
(Gemma has no chat template: the status says it reads the plain prompt). Screenshot in test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 240_000  # ms: the first Compare may convert Gemma 3 270M (about a minute here)


def test_models_tab_family_card_and_side_by_side(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1100})
    goto(page, app_url)
    open_view(page, "Models")
    card = page.locator("#family-card")
    expect(card).to_contain_text("the Llama block as it is", timeout=T)
    expect(card.locator('[data-kind="global"]')).to_have_count(30)
    status = page.locator("#models-status-line")

    page.locator("#prompt textarea").fill("")
    page.locator("#models-compare").click()
    expect(status).to_contain_text("the prompt is empty", timeout=T)

    page.locator("#prompt textarea").fill("The capital of France is")
    chat = page.locator("#chat-toggle input")
    if not chat.is_checked():
        chat.check()
    page.locator("#models-compare").click()
    expect(page.locator("#side-by-side .side")).to_have_count(2, timeout=T)
    expect(status).to_contain_text("has no chat template, so it reads the plain prompt")
    expect(page.locator('#side-by-side .side[data-model="gemma-3-270m"]')).to_contain_text("Next token")
    page.screenshot(path=str(ARTIFACTS / "ui_models_side_by_side.png"), full_page=True)
