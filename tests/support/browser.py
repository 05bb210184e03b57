"""What the browser tests do on the page, in headless chromium over a served app: open it, open a tab, prefill,
step, click a token chip, save and open trace files, pick a dropdown option. `T` is how long an expectation
waits (ms). The app they open: the `app_url` fixture of tests/conftest.py (tests/support/ui_server.py)."""

from __future__ import annotations

import urllib.request

from playwright.sync_api import Page, expect

from tests.support.ui_server import TOUR_SEEN_JS


T = 90_000  # ms: model calls on a shared 2-core machine can be slow; expect() retries until then


def generated(page: Page) -> int:
    return int(page.locator("#token-count").get_attribute("data-generated"))


def prompt_len(page: Page) -> int:
    return int(page.locator("#token-count").get_attribute("data-prompt"))


def open_view(page: Page, label: str) -> None:
    """Open a view or lab tab by its label, opening its group (Views or Labs) first (static/app.js)."""
    assert page.evaluate("(label) => window.inspectorOpenTab(label)", label), f"no tab named {label!r}"
    expect(page.get_by_role("tab", name=label, exact=True)).to_have_attribute("aria-selected", "true", timeout=T)


open_tab = open_view  # the views' tests' name for it


# Every view slot in the viewport holds the value the page keeps for its key (inspector/ui/bundle.py: `show` sets
# the slot's `_shown` to it; a slot mounted when its tab opens draws itself from `window.iiViews`; a lazy slot, a
# plot or a heavy view, out of sight is drawn when it comes into sight: `see`); a key with no value yet has nothing
# to draw.
VIEWS_SHOWN_JS = """() => {
  const views = window.iiViews || {};
  const inSight = (s) => {
    const r = s.getBoundingClientRect();
    return r.bottom > 0 && r.right > 0 && r.top < window.innerHeight && r.left < window.innerWidth;
  };
  return [...document.querySelectorAll('.ii-slot[data-view]')]
    .filter((s) => s.getClientRects().length > 0 && s.dataset.view in views && inSight(s))
    .every((s) => s._shown === (views[s.dataset.view] || ''));
}"""
TWO_FRAMES_JS = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"


def views_settled(page: Page) -> None:
    """Wait until the open tab's views show what the page holds for them and two frames have been laid out since:
    what a layout check reads then is the tab as drawn (not a fixed pause, which is too long on an idle machine
    and may be too short on a loaded one)."""
    page.wait_for_function(VIEWS_SHOWN_JS, polling="raf", timeout=T)
    page.evaluate(TWO_FRAMES_JS)


def see(page: Page, selector: str) -> None:
    """Scroll the view at `selector` into sight, as a visitor does to read it, and wait until the views in sight
    show what the page holds for them (a plot or heavy view out of sight is drawn when it comes into sight)."""
    page.locator(selector).first.scroll_into_view_if_needed(timeout=T)
    views_settled(page)


def goto(page: Page, url: str, tour: bool = False) -> None:
    """Open the app and wait until it is live (the status line is drawn by the page-load event). `tour`:
    as a first visit (the guided tour opens); otherwise as a visitor who has closed it."""
    if not tour:
        page.add_init_script(TOUR_SEEN_JS)
    page.goto(url, timeout=T)
    expect(page.locator("#status-line")).to_be_visible(timeout=T)
    # the load chain's last step (inspector/ui/app.py PAGE_READY_JS): no load step writes the controls after it
    expect(page.locator("body[data-inspector-loaded]")).to_be_attached(timeout=T)


def open_settings(page: Page) -> None:
    """Unfold the sampling / system prompt / examples panel (folded on the first screen), and give its boxes a
    moment to settle: a box typed into within milliseconds of the unfold (faster than a person moves to it)
    can be drawn again with its old value."""
    if not page.locator("#temperature").is_visible():
        page.get_by_text("Sampling, system prompt, example prompts").click()
        expect(page.locator("#decoding-status")).to_be_visible(timeout=T)  # the panel's last part is drawn
        page.wait_for_timeout(400)
    expect(page.locator("#temperature")).to_be_visible(timeout=T)


def prefill(page: Page, prompt: str, max_new: int = 32) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#max-new-tokens input").fill(str(max_new))
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)


def step(page: Page, k: int, max_new: int = 32) -> None:
    page.locator("#step-btn").click()
    expect(page.locator("#status-phase")).to_have_text(f"decode step {k} (token {k + 1} of {max_new})", timeout=T)


def click_chip(page: Page, pos: int, want: str | None = None) -> None:
    """Click the token chip at `pos` until the position box holds `want` (`pos`; "-1" when that chip was the
    selected one): the page's script writes the box at once. A click that lands while an answer replaces the
    chips can land on no chip; only then is it clicked again (a second click on the selected chip clears it)."""
    want = str(pos) if want is None else want
    for attempt in range(3):
        page.locator(f'.ii-chip[data-pos="{pos}"]').click()
        try:
            expect(page.locator("#position input")).to_have_value(want, timeout=3000)
            return
        except AssertionError:
            if attempt == 2:
                raise


def upload(page: Page, files) -> None:
    """Pick `files` in the file chooser that the Open trace button opens."""
    with page.expect_file_chooser() as chooser:
        page.locator("#trace-open-btn").click()
    chooser.value.set_files(files)


def save_trace_as(page: Page, path, status: str = "exported the trace"):
    """Press Save trace, wait for `status` in the status line, and download the file to `path`."""
    page.locator("#trace-save-btn").click()
    expect(page.locator("#status-message")).to_contain_text(status, timeout=T)
    link = page.locator("#trace-file a").first
    expect(link).to_be_visible(timeout=T)
    with urllib.request.urlopen(link.get_attribute("href")) as response:
        path.write_bytes(response.read())
    return path


def chip_ids(page: Page) -> list[str]:
    return page.locator(".ii-chip").evaluate_all("cs => cs.map(c => c.dataset.id)")


def choose(page: Page, elem_id: str, option: str) -> None:
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=option, exact=True).click()
