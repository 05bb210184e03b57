"""End-to-end: the Attention view's head atlas in headless chromium over the real default model.

After a short run, compute the atlas on a small probe (2 sequences of 16 tokens), click head 17.3 on the map
(a real mouse click on its cell): its patterns on the probe and on the run appear and the view's sliders move
to it; then Ablate the top 2 induction heads beside 2 random ones, on the probe and in the run (two branches
in the page's branch tree). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import goto, open_view, prefill, see
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]
T = 120_000  # ms: a shared 2-core machine can be slow

# where a head's cell of the map is on the screen: plotly's own axes (head on x, layer on y)
CELL_JS = """([layer, head]) => {
  const gd = document.querySelector('#heads-map .js-plotly-plot');
  const size = gd._fullLayout._size, box = gd.getBoundingClientRect();
  return [box.left + size.l + gd._fullLayout.xaxis.l2p(head), box.top + size.t + gd._fullLayout.yaxis.l2p(layer)];
}"""


def test_atlas_click_a_head_and_ablate(page: Page, app_url):
    page.set_viewport_size({"width": 1400, "height": 1000})
    goto(page, app_url)
    page.locator("#chat-toggle input").uncheck()
    prefill(page, "The cat sat on the mat. The cat sat on the", 4)
    open_view(page, "Attention")
    status = page.locator("#heads-status")
    page.locator("#heads-n input").fill("16")
    page.locator("#heads-k-probes input").fill("2")
    page.locator("#heads-compute").click()
    expect(status).to_contain_text("270 heads scored on 2 x 32 tokens", timeout=T)
    expect(page.locator("#heads-legend")).to_contain_text("2 sequences of 16 random tokens")

    page.locator("#heads-map").scroll_into_view_if_needed()
    expect(page.locator("#heads-map .js-plotly-plot")).to_be_visible(timeout=T)
    x, y = page.evaluate(CELL_JS, [17, 3])
    page.mouse.click(x, y)
    expect(status).to_contain_text("head 17.3 on the probe", timeout=T)
    expect(status).to_contain_text("on this run (")
    expect(page.locator("#heads-pattern")).to_contain_text("Head 17.3", timeout=T)
    expect(page.locator("#attn-layer input[type='number']")).to_have_value("17", timeout=T)
    expect(page.locator("#attn-head input[type='number']")).to_have_value("3")
    see(page, "#attn-pattern")  # above the atlas: a plot out of sight is drawn when it comes into sight
    expect(page.locator("#attn-pattern")).to_contain_text("Layer 17 head 3", timeout=T)  # the view redrawn there

    page.locator("#heads-top-k input").fill("2")
    page.locator("#heads-ablate").click()
    expect(status).to_contain_text("without the top 2 induction heads", timeout=T)
    expect(page.locator("#heads-ablation")).to_contain_text("2 random heads", timeout=T)
    page.locator("#heads-ablate-run").click()  # the same heads off in the page's run: two branches of it
    expect(status).to_contain_text("branch #2: top 2 induction heads off", timeout=T)
    expect(page.locator("#heads-run-ablation")).to_contain_text("2 random heads off", timeout=T)
    tree = page.locator("#branch-tree")
    expect(tree).to_have_attribute("data-branches", "3", timeout=T)
    expect(tree).to_have_attribute("data-current", "2")
    page.locator("#heads-panel").screenshot(path=str(ARTIFACTS / "ui_head_atlas.png"))

    page.locator("#heads-n input").fill("0")
    page.locator("#heads-compute").click()
    expect(status).to_contain_text("probe length n must be a whole number from 2 to 128, got 0", timeout=T)
    expect(status.locator("[data-error='1']")).to_have_count(1)
