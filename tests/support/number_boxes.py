"""The number-box tests' pieces (tests/browser/test_ui_number_boxes*.py): the bad values typed into each box,
what the page must say about each, typing and leaving a box, pressing an action until its answer shows, the
request a button sends, and the `python app.py` server whose log must hold no traceback. Import the
fixtures explicitly (`server`, and `width`: autouse, every test at 1280 px and 390 px).

The two files share one server, `number_box_server` of tests/browser/conftest.py (one worker runs both files:
SAME_WORKER in tests/conftest.py); `server` checks its log when each file's tests end."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import T
from tests.support.ui_server import Server


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
def server(number_box_server: Server) -> Iterator[Server]:
    yield number_box_server
    assert_no_traceback(number_box_server)


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
