"""End-to-end, headless chromium over a tiny random mixture of experts (a Mixtral of 2 layers, 5 experts, 2
per token) served in this process (`tiny_moe_app` of tests/conftest.py, shared with
tests/served/test_fuzz_api_tiny.py): the Routing tab draws its map, router chart and load; its layer slider
moves the Attention view's and a clicked token is the one the router chart shows; the Timing view shows the
weights each step read. Screenshot in test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import click_chip, goto, open_view, prefill, see, step
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 60_000  # ms: a tiny model's calls on a shared 2-core machine


@pytest.fixture
def moe_url(tiny_moe_app):
    return tiny_moe_app.local_url


def test_the_routing_tab_draws_and_the_timing_view_shows_the_weights_read(page: Page, moe_url):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, moe_url)
    prefill(page, "The quick brown fox", max_new=6)
    step(page, 1, max_new=6)

    open_view(page, "Routing")
    expect(page.locator("#routing-map-view #routing-map")).to_be_visible(timeout=T)
    expect(page.locator("#routing-load-view #routing-load")).to_be_visible(timeout=T)
    title = page.locator("#router-chart .gtitle")
    expect(title).to_contain_text("Router at layer 0", timeout=T)
    box = page.locator("#routing-layer input[type=number]")
    box.fill("1")
    box.press("Tab")
    see(page, "#router-chart")  # a view out of sight is drawn when it comes into sight (inspector.ui.bundle)
    expect(title).to_contain_text("Router at layer 1", timeout=T)
    click_chip(page, 2)  # redrawn with the page's layer: this tab's slider set it
    see(page, "#router-chart")
    expect(title).to_contain_text(re.compile(r"layer 1.*\(position\s*2\)"), timeout=T)
    expect(page.locator("#status-message.ii-error")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "ui_routing.png"), full_page=True)
    open_view(page, "Attention")
    expect(page.locator("#attn-layer input[type=number]")).to_have_value("1", timeout=T)

    open_view(page, "Timing")
    see(page, "#weights-read-chart")
    expect(page.locator("#weights-read-chart .gtitle")).to_contain_text("Weights read per step", timeout=T)
    expect(page.locator("#weights-read-chart .bars")).not_to_have_count(0, timeout=T)
