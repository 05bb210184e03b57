"""The page's layout at a desktop width (1280 px) and on a phone (390 px), in headless chromium over the
real default model: every tab label of both groups (Views, Labs) is in sight without Gradio's overflow
menu, whole (not cut short), every table fits its box or scrolls inside it, every chart's title is
whole, and every chart is drawn by the page's one plotly.js."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, goto, open_view, prefill, step, views_settled
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
VIEWS = ["Residual stream", "Attention", "KV cache", "Sampling", "Tensor inventory", "Timing", "Beams"]
LABS = ["Speculative", "Serving", "Quantization", "KV policies", "Interventions", "Models", "Training"]

# Shown tab buttons that are off the screen or cut short; shown overflow ("More tabs") menus; shown tables
# wider than the nearest box that clips them, unless that box scrolls sideways; chart titles wider than
# their chart (plotly.js never wraps a title: the SVG cuts it).
LAYOUT_FAULTS = """(width) => {
  const shown = (el) => el.getClientRects().length > 0;
  const faults = [];
  for (const b of document.querySelectorAll('button[role=tab]')) {
    if (!shown(b)) continue;
    const r = b.getBoundingClientRect();
    if (r.left < 0 || r.right > width + 0.5) faults.push(`tab ${b.textContent.trim()} is off the screen`);
    if (b.scrollWidth > b.clientWidth + 1) faults.push(`tab ${b.textContent.trim()} is cut short`);
  }
  document.querySelectorAll('.overflow-menu').forEach((m) => {
    if (shown(m) && getComputedStyle(m).display !== 'none') faults.push('an overflow menu is shown');
  });
  for (const t of document.querySelectorAll('table')) {
    if (!shown(t)) continue;
    let box = t.parentElement;
    while (box && box !== document.body && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    const cs = getComputedStyle(box);
    const scrolls = cs.overflowX === 'auto' || cs.overflowX === 'scroll';
    const right = t.getBoundingClientRect().right, edge = Math.min(box.getBoundingClientRect().right, width);
    if (!scrolls && right > edge + 0.5) faults.push(`table ${t.id || t.className} is clipped (${right} > ${edge})`);
  }
  for (const title of document.querySelectorAll('.js-plotly-plot .gtitle')) {
    const plot = title.closest('.js-plotly-plot');
    if (!shown(plot) || !title.textContent) continue;
    const r = title.getBoundingClientRect(), edge = plot.getBoundingClientRect().right;
    if (r.right > edge + 0.5) faults.push(`the title "${title.textContent}" is cut off (${r.right} > ${edge})`);
  }
  return faults;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_every_tab_is_in_sight_and_every_table_fits(page: Page, app_url, width: int):
    page.set_viewport_size({"width": width, "height": 900})
    scripts = []  # every script the page fetches: one plotly.js draws every chart (inspector/ui/figure.py)
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    goto(page, app_url)
    prefill(page, "The capital of France is", max_new=8)
    step(page, 1, max_new=8)
    for label in VIEWS + LABS:
        open_view(page, label)  # asserts the tab opened
        group = "#tab-views-button" if label in VIEWS else "#tab-labs-button"
        expect(page.locator(group)).to_have_attribute("aria-selected", "true")
        if label == "Serving":  # its request table appears once requests are loaded
            page.locator("#serving-load").click()
            expect(page.locator("#serving-status")).to_contain_text("queued", timeout=T)
        if label == "Tensor inventory":
            expect(page.locator("#inventory-table")).to_be_visible(timeout=T)
        views_settled(page)
        faults = page.evaluate(LAYOUT_FAULTS, width)
        assert not faults, f"{label} at {width} px:\n" + "\n".join(faults)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{label}: wider than the screen"
        undrawn = page.evaluate("() => [...document.querySelectorAll('.ii-figure-box')].filter((b) => "
                                "b.getClientRects().length > 0 && !b.querySelector('.js-plotly-plot .main-svg'))"
                                ".map((b) => b.id)")
        assert undrawn == [], f"{label}: charts not drawn: {undrawn}"
    # Gradio's gr.Plot would load its own copy of plotly.js (its PlotlyPlot chunk) when a tab holding one opens
    assert [u for u in scripts if "PlotlyPlot" in u] == []
    assert len([u for u in scripts if u.endswith("plotly.min.js")]) == 1
    labels = page.get_by_role("tab").evaluate_all("bs => bs.map(b => b.textContent.trim())")
    assert [x for x in LABS if x not in labels] == [], "a lab tab is missing from the Labs row"
    page.screenshot(path=str(ARTIFACTS / f"layout_labs_{width}.png"))
