"""The number-box tests' pieces (tests/browser/test_ui_number_boxes*.py): the bad values typed into each box,
what the page must say about each, typing and leaving a box, pressing an action until its answer shows, the
request a button sends, and the served app's log, which must hold no traceback. Import the fixtures
explicitly (`server`, and `width`: autouse, every test at 1280 px and 390 px).

The app is the one every browser test of this process opens (`app_url`, tests/conftest.py), served in this
process. Its log is what this process writes while a test runs: everything on file descriptors 1 and 2
(`capfd`: where Gradio prints the traceback of an event that failed, a ComponentProcessingError from its own
preprocessing or an exception from a handler, from whichever thread) and every log record of WARNING or
above (Gradio's and uvicorn's loggers, whose handlers may hold a stream from before the test). `server`
holds it from before the page opens until after the page has closed and the app's queued work has run, and
checks it then; a test also checks it at its end (`assert_no_traceback`)."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import T


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
    if re.fullmatch(r"-?\d+(\.\d+)?(e\d+)?", value):
        box.fill(value)  # fill replaces what the box holds
    else:
        box.fill("")
        if value:
            box.press_sequentially(value)


class ServedApp:
    """The served app's address and its log since the test began (`text()`)."""

    def __init__(self, url: str, capfd: pytest.CaptureFixture) -> None:
        self.url = url
        self._capfd = capfd
        self._seen: list[str] = []
        self.records = _Records()

    def text(self) -> str:
        out, err = self._capfd.readouterr()
        self._seen += [out, err]
        sys.stdout.write(out)  # shown with the test's report, as pytest shows what a test prints
        sys.stderr.write(err)
        return "".join(self._seen) + "".join(self.records.lines)


class _Records(logging.Handler):
    """Every log record of WARNING or above, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + "\n")


def assert_no_traceback(server: ServedApp) -> None:
    log = server.text()
    for bad in ("Traceback", "ComponentProcessingError"):
        assert bad not in log, f"the server log has a {bad}:\n{log[-4000:]}"


def queue_ended(demo, within_s: float = 5.0) -> None:
    """Wait (up to `within_s`) until Gradio's queue of `demo` holds no event and runs none."""
    queue = demo._queue
    deadline = time.monotonic() + within_s
    while (len(queue) or queue.get_active_worker_count()) and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def server(app_demo, app_url: str, capfd: pytest.CaptureFixture) -> Iterator[ServedApp]:
    """The served app, its log held for this test (set up before the page opens: `width` takes it)."""
    from inspector.ui import model_thread

    app = ServedApp(app_url, capfd)
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]  # uvicorn's do not pass records to the root
    for logger in loggers:
        logger.addHandler(app.records)
    try:
        yield app
        queue_ended(app_demo)  # an event the closed page left in Gradio's queue has ended
        model_thread.settle()  # the work the page's last events queued has run, and printed what it would
        assert_no_traceback(app)
    finally:
        for logger in loggers:
            logger.removeHandler(app.records)


@pytest.fixture(autouse=True, params=[1280, 390], ids=["1280px", "390px"])
def width(request, server: ServedApp, page: Page) -> int:
    """Every box is tried at a desktop width and on a 390 px phone (the tab rows wrap there)."""
    page.set_viewport_size({"width": request.param, "height": 900})
    return request.param


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
                toasts = page.locator(".toast-body").all_text_contents()  # Gradio's own errors ("Connection lost")
                raise AssertionError(f"{exc}\nstatus line: {page.locator('#status-line').text_content()}\n"
                                     f"Gradio's messages: {toasts}") from None


def click(page: Page, selector: str) -> Callable[[], None]:
    return lambda: page.locator(selector).click()


def enter_and_click(page: Page, selector: str, value: str, button: str) -> Callable[[], None]:
    """Type `value` into the box and press `button`: as an `until` action, the value is typed again with each
    press, so a box drawn again with its old value (a panel just unfolded) is sent what was typed."""
    def action() -> None:
        enter(page, selector, value)
        page.locator(button).click()
    return action


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
