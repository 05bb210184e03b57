"""Every number box of the page, typed into in a real browser at 1280 px and on a 390 px phone: bad values
are named on the page, never a traceback in the server's log, and the session goes on. The main page, its
settings panel, the head atlas, Beams and Serving's chunk box here; the other labs' boxes in
test_ui_number_boxes_labs.py.

The app runs as `python app.py` in a subprocess (`harness.server_proc.Server`), so its whole stdout/stderr,
where Gradio prints the traceback of an event that failed (a ComponentProcessingError from its own
preprocessing, or an exception from a handler), is in one log file the tests read.

Each number box gets: empty, `abc`, `nan`, `inf`, `1e309` (Chromium leaves all five empty in a number input:
the server gets None), `-5`, and a value past the end. A text box that takes a number (the settings panel's
decoding boxes, the Interventions lab) gets empty, `-5`, `abc` and `1e309` as typed; `-5` is skipped where
it is a good value (a scale factor, a steering strength). A slider's number box sends the typed value in a
`release` event when left, so sliders are checked on leaving the box; Gradio then clamps the box, and the
page's script puts the typed value back, so the tab's action (Prefill, Start, Load) is sent what was typed
(checked on the request). A number box is checked by the tab's action. The values are ordered so that no two in a row
give the same message: each expectation waits for the answer to its own value. A click that lands while
the previous event of that button is still finishing is dropped by Gradio (trigger_mode "once"), so an
action is repeated until its answer shows (`until`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from harness.server_proc import Server
from tests.test_ui_e2e import T, goto, open_settings, open_view, prefill

pytestmark = [pytest.mark.slow, pytest.mark.browser]

EMPTY = ("", "abc", "nan", "inf", "1e309")  # what Chromium's number input turns into an empty box


def values(past_end: str) -> list[str]:
    """Every bad value once (two kinds twice), no two neighbours with the same message."""
    return ["", "-5", "abc", past_end, "nan", "-5", "inf", past_end, "1e309"]


def expected(name: str, value: str, past_end_message: str | None = None) -> re.Pattern:
    """What the page must say about `value` typed into the box of field `name`."""
    if value in EMPTY:
        return re.compile(re.escape(f"{name} is empty"))
    if past_end_message is not None and value not in ("-5",):
        return re.compile(re.escape(past_end_message))
    return re.compile(rf"{re.escape(name)} must be .*, got {re.escape(value)}")


TEXT = ("", "-5", "abc", "1e309")  # typed into a text box as they are


def named(name: str, value: str) -> re.Pattern:
    """What the page must say about `value` typed into the text box of field `name`."""
    if not value.strip():
        return re.compile(re.escape(f"{name} is empty"))
    return re.compile(rf"{re.escape(name)} must be .*, got '?{re.escape(value)}'?")


def type_and_leave(page: Page, selector: str, value: str) -> Callable[[], None]:
    """Type `value` into a text box and leave it (Tab)."""
    def action() -> None:
        page.locator(selector).fill(value)
        page.locator(selector).press("Tab")
    return action


def text_box(elem_id: str) -> str:
    return f"#{elem_id} :is(input, textarea)"


def enter(page: Page, selector: str, value: str) -> None:
    """Type `value` into the box: number syntax is filled at once ("1e309" too: typed key by key, the box
    holds "1e30" on the way and the page's script may keep that), other text typed key by key (Playwright
    refuses to fill it into a number input; Chromium drops the keys it does not take)."""
    box = page.locator(selector)
    box.fill("")
    if re.fullmatch(r"-?\d+(\.\d+)?(e\d+)?", value):
        box.fill(value)
    elif value:
        box.press_sequentially(value)


def server_log(server: Server) -> str:
    server.log.flush()
    return Path(server.log.name).read_text(errors="replace")


def assert_no_traceback(server: Server) -> None:
    log = server_log(server)
    for bad in ("Traceback", "ComponentProcessingError"):
        assert bad not in log, f"the server log has a {bad}:\n{log[-4000:]}"


@pytest.fixture(autouse=True, params=[1280, 390], ids=["1280px", "390px"])
def width(request, page: Page) -> int:
    """Every box is tried at a desktop width and on a 390 px phone (the tab rows wrap there)."""
    page.set_viewport_size({"width": request.param, "height": 900})
    return request.param


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with Server(env={"PYTHONUNBUFFERED": "1"}) as s:
        yield s
        assert_no_traceback(s)


def until(page: Page, action: Callable[[], None], where: str, text: str | re.Pattern, method: str = "to_contain_text",
          retry_ms: int = 3000) -> None:
    """Do `action` until `where` shows `text` (again every `retry_ms`; fail after T)."""
    deadline = time.monotonic() + T / 1000
    while True:
        action()
        try:
            getattr(expect(page.locator(where)), method)(text, timeout=retry_ms)
            return
        except AssertionError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{exc}\nstatus line: {page.locator('#status-line').text_content()}") from None


def click(page: Page, selector: str) -> Callable[[], None]:
    return lambda: page.locator(selector).click()


def leave(page: Page, selector: str, value: str) -> Callable[[], None]:
    """Type `value` into the box and leave it (Tab): a slider's box then sends `release`."""
    def action() -> None:
        enter(page, selector, value)
        page.locator(selector).press("Tab")
    return action


def check_slider(page: Page, selector: str, name: str, status: str, past_end: str, action: str | None = None,
                 sent_with: str = "Hi") -> None:
    """A slider's number box: each bad value, left with Tab, is named in `status` at once. With `action` (a
    button): the past-the-end value, typed and the button pressed, is sent to the server as typed (the
    request carrying `sent_with`), not clamped, and the page names it."""
    for v in values(past_end):
        until(page, leave(page, selector, v), status, expected(name, v))
    if action is not None:
        enter(page, selector, past_end)
        assert float(past_end) in sent(page, action, sent_with)
        expect(page.locator(status)).to_contain_text(expected(name, past_end), timeout=T)


def sent(page: Page, button: str, marker: str) -> list:
    """Press `button` (again while no request goes out: Gradio drops a click while that button's previous
    event finishes) and return the inputs of the queued request that carries `marker`."""
    deadline = time.monotonic() + T / 1000
    while True:
        try:
            with page.expect_request(lambda r: "queue/join" in r.url and marker in (r.post_data or ""),
                                     timeout=5000) as request:
                page.locator(button).click()
            return json.loads(request.value.post_data)["data"]
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise


def test_main_page_boxes(page: Page, server: Server):
    goto(page, server.url)
    page.locator("#prompt textarea").fill("Hi")
    open_settings(page)
    msg = "#status-message"
    # number boxes, checked by Prefill
    for selector, name, past_end, past_end_message in [
        ("#max-new-tokens input", "max new tokens", "99999", "max new tokens is capped at 256"),
        ("#seed input", "seed", "1.5", None),  # a seed has no end: a fraction instead
    ]:
        for v in values(past_end):
            enter(page, selector, v)
            until(page, click(page, "#prefill-btn"), msg, expected(name, v, past_end_message))
        enter(page, selector, "4" if "max" in selector else "0")
    until(page, click(page, "#prefill-btn"), "#status-phase", "prefill done", "to_have_text")
    # Play's speed (tokens/s), checked by Play
    for v in values("99"):
        enter(page, "#play-speed input", v)
        until(page, click(page, "#play-btn"), msg, expected("speed (tokens/s)", v))
    enter(page, "#play-speed input", "3")

    # sliders: the preview of the sampling distribution refuses a bad value as the box is left
    # (each is set back to a good value before the next: the preview names the first bad control)
    for selector, name, good in [("#temperature", "temperature", "0"), ("#top-k", "top-k", "0"),
                                 ("#top-p", "top-p", "1"), ("#min-p", "min-p", "0")]:
        check_slider(page, f"{selector} input[type=number]", name, msg, "99999", action="#prefill-btn")
        leave(page, f"{selector} input[type=number]", good)()

    # the attention view's sliders and the selected-position box
    open_view(page, "Attention")
    for selector, name in [("#attn-layer", "layer"), ("#attn-head", "query head")]:
        check_slider(page, f"{selector} input[type=number]", name, msg, "99999")
        leave(page, f"{selector} input[type=number]", "0")()
    for v in values("99999"):
        enter(page, "#position input", v)
        until(page, lambda: page.locator("#position input").press("Enter"), msg, expected("selected position", v))
    enter(page, "#position input", "-1")
    page.locator("#position input").press("Enter")

    # the session goes on: prefill and step with good values
    until(page, click(page, "#prefill-btn"), "#status-phase", "prefill done", "to_have_text")
    until(page, click(page, "#step-btn"), "#status-phase", "decode step 1 (token 2 of 4)", "to_have_text", 20_000)
    expect(page.locator("#status-message.ii-error")).to_have_count(0)
    assert_no_traceback(server)


def test_settings_panel_decoding_boxes(page: Page, server: Server):
    goto(page, server.url)
    open_settings(page)
    status = "#decoding-status"
    for elem_id, name, good in [("repetition-penalty", "repetition-penalty", "1"),
                                ("presence-penalty", "presence-penalty", "0"),
                                ("frequency-penalty", "frequency-penalty", "0"),
                                ("no-repeat-ngram", "no-repeat-ngram-size", "0"),
                                ("min-new-tokens", "min-new-tokens", "0"), ("num-beams", "num-beams", "4"),
                                ("length-penalty", "length-penalty", "1")]:
        for v in TEXT:  # each box is applied when left
            until(page, type_and_leave(page, text_box(elem_id), v), status, named(name, v))
        type_and_leave(page, text_box(elem_id), good)()
        expect(page.locator(f"{status} .ii-error")).to_have_count(0, timeout=T)
    prefill(page, "Hi", max_new=2)  # the session goes on
    assert_no_traceback(server)


def test_beams_and_serving_chunk_boxes(page: Page, server: Server):
    goto(page, server.url)
    page.locator("#prompt textarea").fill("Hi")
    enter(page, "#max-new-tokens input", "3")
    open_settings(page)
    # typed right after the panel unfolds, a box can be drawn again with its old value: type until applied
    until(page, type_and_leave(page, text_box("num-beams"), "2"), "#decoding-status", "2 beams")
    open_view(page, "Beams")
    until(page, click(page, "#beams-run"), "#beams-status", "2 beams,", retry_ms=T)
    check_slider(page, "#beams-step input[type=number]", "tree after step", "#beams-status", "99999")
    until(page, leave(page, "#beams-step input[type=number]", "1"), "#beams-status", "the tree after step 1")

    open_view(page, "Serving")
    for v in values("999999"):
        enter(page, "#serving-chunk input", v)
        until(page, click(page, "#serving-load"), "#serving-status", expected("prefill chunk", v))
    enter(page, "#serving-chunk input", "0")
    until(page, click(page, "#serving-load"), "#serving-status", "queued")
    assert_no_traceback(server)


def test_head_atlas_boxes(page: Page, server: Server):
    """The Attention view's head atlas: the probe's boxes, checked by Compute, and top-k, checked by Ablate
    (every value refused before any model work)."""
    goto(page, server.url)
    open_view(page, "Attention")
    status = "#heads-status"
    for selector, name, past_end, good in [("#heads-n input", "probe length n", "99999", "16"),
                                           ("#heads-k-probes input", "probes K", "99999", "2"),
                                           ("#heads-seed input", "seed", "1.5", "0")]:
        for v in values(past_end):
            enter(page, selector, v)
            until(page, click(page, "#heads-compute"), status, expected(name, v))
        enter(page, selector, good)
    for v in values("99999"):
        enter(page, "#heads-top-k input", v)
        until(page, click(page, "#heads-ablate"), status, expected("top-k", v))
    enter(page, "#heads-top-k input", "2")
    assert_no_traceback(server)
