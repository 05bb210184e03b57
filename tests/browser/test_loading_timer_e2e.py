"""static/loading_timer.js: once a page has loaded, its idle tab asks for no animation frames, while an event's
status tracker still counts the seconds the event is pending. A page script (FRAMES_JS, loaded before the page's
own scripts) counts every frame the page asks for."""

from __future__ import annotations

import re
import time

import gradio as gr
import pytest
from playwright.sync_api import Page, expect

from harness.app_server import launch_here
from inspector.ui.page_head import head_middleware

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Below every other wrapper of requestAnimationFrame (an init script runs before the page's scripts).
FRAMES_JS = """(() => {
  const request = window.requestAnimationFrame.bind(window);
  window.iiFramesAsked = 0;
  window.requestAnimationFrame = (callback) => { window.iiFramesAsked += 1; return request(callback); };
})();"""

# Milliseconds for each look at the frames asked for, and how long to look for a quiet one. Gradio's loading
# screen animates its spinner for about 4 s after the page shows, then stops; its timer's loop never stops.
WINDOW_MS = 1000
QUIET_WITHIN_S = 15
SPINNER_DONE_MS = 6000


def slow_button(with_fix: bool) -> gr.Blocks:
    """A page whose button answers after 1.5 s, with Gradio's full progress (its timer shown) on the output;
    `with_fix`: launched with the app's head scripts (`head_middleware`) as the app is."""
    with gr.Blocks() as demo:
        out = gr.Textbox(elem_id="out")
        gr.Button("Go", elem_id="go-btn").click(lambda: time.sleep(1.5) or "done", None, out, show_progress="full")
    return launch_here(demo, app_kwargs={"middleware": [head_middleware()]} if with_fix else None)


def frames_in_window(page: Page) -> int:
    before = page.evaluate("window.iiFramesAsked")
    page.wait_for_timeout(WINDOW_MS)
    return page.evaluate("window.iiFramesAsked") - before


def quiet_window(page: Page) -> bool:
    """Whether the page goes a whole WINDOW_MS asking for no frame, within QUIET_WITHIN_S."""
    end = time.monotonic() + QUIET_WITHIN_S
    while time.monotonic() < end:
        if frames_in_window(page) == 0:
            return True
    return False


def opened(page: Page, with_fix: bool) -> gr.Blocks:
    demo = slow_button(with_fix)
    page.add_init_script(FRAMES_JS)
    page.goto(demo.local_url)
    expect(page.locator("#go-btn")).to_be_visible(timeout=30_000)
    return demo


def seconds_shown(page: Page) -> float | None:
    """The seconds the output's status tracker shows (e.g. "processing | 0.8s"), if it shows them."""
    match = re.search(r"(\d+\.\d)s", page.locator("#out [data-testid='status-tracker']").inner_text())
    return float(match.group(1)) if match else None


def test_an_idle_page_asks_for_no_frames_and_a_pending_event_still_counts_its_seconds(page: Page):
    demo = opened(page, True)
    try:
        assert quiet_window(page), "the loaded page kept asking for animation frames"
        assert page.evaluate("window.iiLoadingTimer") == {"tied": 1, "ended": 1}
        page.locator("#go-btn").click()
        page.wait_for_function("() => /\\d\\.\\ds/.test(document.querySelector(\"#out [data-testid='status-tracker']\")"
                               ".innerText)", timeout=5000)
        first = seconds_shown(page)
        page.wait_for_timeout(500)
        later = seconds_shown(page)
        assert first is not None and later is not None and later > first  # the pending event's timer runs
        expect(page.locator("#out textarea")).to_have_value("done", timeout=10_000)
        assert quiet_window(page), "the page kept asking for animation frames after its event ended"
        assert page.evaluate("window.iiLoadingTimer.ended") == 1  # the event's own loop ended by itself
    finally:
        demo.close()


def test_without_it_gradio_keeps_asking_for_frames(page: Page):
    """The loop is real in the Gradio installed: without static/loading_timer.js the loaded page asks for frames in
    every window. If this fails, Gradio ends the loading screen's loop itself now, and static/loading_timer.js can
    go."""
    demo = opened(page, False)
    try:
        page.wait_for_timeout(SPINNER_DONE_MS)
        assert frames_in_window(page) >= 10  # about 60 a second; 0 with the script
    finally:
        demo.close()
