"""A big image heatmap's hover values and its row and column names travel beside the view bundle, as files
fetched on the first hover (inspector/ui/bundle_parts.py HoverFiles, static/app.js): the tip names the cell and
shows the server's value."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from inspector.ui.bundle_parts import HOVER_INLINE_MAX
from tests.support.browser import T, goto, open_tab, prefill, prompt_len, see, step

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PROMPT = " ".join(f"Stone {i} sits by the river and the river runs on." for i in range(8))  # about 100 tokens


def shown_weight(page: Page, x: float, y: float, names: str) -> str:
    page.locator("#attn-overview-map img").hover(position={"x": x, "y": y})
    tip = page.locator("#attn-overview-map .ii-hm-tip")
    expect(tip).to_contain_text(re.compile(re.escape(names) + r".*: attention weight \d\.\d{3}$"), timeout=T)
    return tip.text_content().rsplit(" ", 1)[1]


def test_overview_hover_values_come_from_a_file_and_are_the_servers(page: Page, app_url, app_demo):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    prefill(page, PROMPT)
    n = prompt_len(page)
    open_tab(page, "Attention")
    step(page, 1)
    see(page, "#attn-overview")  # below the fold: drawn when it comes into sight (inspector.ui.bundle)
    expect(page.locator("#attn-overview")).to_contain_text(f"query at position {n}", timeout=T)
    heat = page.locator("#attn-overview-map")
    assert 270 * (n + 1) * 4 * 4 / 3 > HOVER_INLINE_MAX  # so big that its values go as a file
    expect(heat).to_have_attribute("data-z-src", re.compile(r"^gradio_api/file=.+\.f32\.b64$"))
    expect(heat).to_have_attribute("data-names-src", re.compile(r"^gradio_api/file=.+\.names\.json$"))
    assert heat.get_attribute("data-z") is None
    assert heat.get_attribute("data-cols") is None and heat.get_attribute("data-rows") is None

    visitor = next(v for v in app_demo.store.live() if v.session is not None and v.tab == "attention"
                   and len(v.session.prompt_ids) == n and len(v.session.generated_ids) == 2)
    rows = visitor.session.attention_overview(visitor.session.records[-1].step)  # (layers, heads, keys)
    box = page.locator("#attn-overview-map img").bounding_box()
    newest = shown_weight(page, box["width"] - 1, 1, f"L0·H0·kv0 → key {n}:")  # first row, newest key
    assert newest == f"{float(rows[0, 0, -1]):.3f}"
    first = shown_weight(page, 1, box["height"] - 1, "L29·H8·kv2 → key 0:")  # last row, first key
    assert first == f"{float(rows[-1, -1, 0]):.3f}"
