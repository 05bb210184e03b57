"""Every number box of the page, typed into in a real browser: bad values are named on the page, never a
traceback in the server's log, and the session goes on.

The app runs as `python app.py` in a subprocess (`tests.server_proc.Server`), so its whole stdout/stderr,
where Gradio prints the traceback of an event that failed (a ComponentProcessingError from its own
preprocessing, or an exception from a handler), is in one log file the tests read.

Each box gets: empty, `abc`, `nan`, `inf`, `1e309` (Chromium leaves all five empty in a number input: the
server gets None), `-5`, and a value past the end. A slider's number box sends the typed value in a
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

from tests.server_proc import Server
from tests.test_ui_e2e import T, goto, open_settings, open_view

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


def test_lab_tab_boxes(page: Page, server: Server):
    goto(page, server.url)
    page.locator("#prompt textarea").fill("Hi")
    enter(page, "#max-new-tokens input", "4")

    open_view(page, "Speculative")
    status = "#speculative-status"
    for selector, name, good in [("#speculative-layer", "early-exit layer L", "20"), ("#speculative-k", "draft length k", "2")]:
        check_slider(page, f"{selector} input[type=number]", name, status, "99999", action="#speculative-start")
        leave(page, f"{selector} input[type=number]", good)()
    until(page, click(page, "#speculative-start"), status, "prefill done")
    until(page, click(page, "#speculative-round"), status, "round 1", retry_ms=T)

    open_view(page, "Serving")
    status = "#serving-status"
    for selector, name, good in [("#serving-max-batch", "max batch", "4"), ("#serving-n", "continuations per request", "1")]:
        check_slider(page, f"{selector} input[type=number]", name, status, "99999", action="#serving-load",
                     sent_with="The capital of France")
        leave(page, f"{selector} input[type=number]", good)()
    for v in values("999999"):
        enter(page, "#serving-pool input", v)
        until(page, click(page, "#serving-load"), status, expected("pool blocks", v))
    enter(page, "#serving-pool input", "0")
    until(page, click(page, "#serving-load"), status, "queued")
    until(page, click(page, "#serving-step"), status, "step 0", retry_ms=T)
    for selector, name, good in [("#serving-mem-context", "context (tokens)", "4096"), ("#serving-mem-batch", "batch", "8"),
                                 ("#serving-mem-gib", "memory (GiB)", "80")]:
        check_slider(page, f"{selector} input[type=number]", name, "#serving-mem-info", "999999")
        leave(page, f"{selector} input[type=number]", good)()
    until(page, leave(page, "#serving-mem-gib input[type=number]", "80"), "#serving-mem-line", "requests of")

    open_view(page, "Quantization")
    status = "#quant-status"
    until(page, click(page, "#quant-run"), status, "compared with fp32", retry_ms=T)
    check_slider(page, "#quant-step input[type=number]", "step", status, "99999")
    until(page, leave(page, "#quant-step input[type=number]", "1"), status, "step 1")
    assert_no_traceback(server)
