"""End-to-end: a Step pressed right after Prefill lands, after the sequence that once lost it.

The sequence (FINDINGS 2026-11-27): in the settings panel, for each number box of the run (temperature, max
new tokens, seed, top-k, top-p, min-p) and each bad value ("", "abc", -5, 1e309, 99999): the good value,
Prefill, then the bad value, Prefill and Step (each refused in one line); then every box good again,
Prefill, and Step. The last Step was lost in 2 of 4 passes: the new prefill waits in Gradio's queue while
the unqueued Step runs at once on the old run, and the page already read "prefill done" (the last run's), so
the Step was pressed before the prefill ran and its answer was then covered by the prefill's. Here that last
prefill is made slow on purpose, so the Step always comes first: it must wait for the prefill and step the
new run, and the page must say the prefill is coming until it is done.

A Prefill pressed while the last prefill is still pending runs too, after it (it was dropped by Gradio, and
when the ask had landed after the last prefill started, the page read "prefill: waiting" for good).

A tab's draw answered after a chip click or a sampling preview that came later (its answer held on purpose)
leaves the selection and the preview on the page, and still shows what only it drew (the chip lost its
outline and the tab its position in a full run, when the tab's draw came second).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, click_chip, goto, open_settings, open_view, prefill, see, step

pytestmark = [pytest.mark.slow, pytest.mark.browser]
BOXES = [("#temperature input[type=number]", "0"), ("#max-new-tokens input", "8"), ("#seed input", "0"),
         ("#top-k input[type=number]", "0"), ("#top-p input[type=number]", "1"), ("#min-p input[type=number]", "0")]
BAD = ["", "abc", "-5", "1e309", "99999"]


def enter(page: Page, selector: str, value: str) -> None:
    box = page.locator(selector)
    box.fill("")
    try:
        box.fill(value)
    except Exception:  # noqa: BLE001 - a number input refuses "abc" by fill: type it key by key
        box.press_sequentially(value)
    box.press("Tab")


def test_a_step_right_after_prefill_lands_after_refused_values(page: Page, app_url, monkeypatch):
    from inspector.session.session import Session

    page.set_viewport_size({"width": 1400, "height": 900})
    goto(page, app_url)
    page.locator("#prompt textarea").fill("Hello there")
    open_settings(page)
    for selector, good in BOXES:
        for bad in BAD:
            enter(page, selector, good)
            page.locator("#prefill-btn").click()
            expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)
            enter(page, selector, bad)
            page.locator("#prefill-btn").click()  # refused in one line (a seed of 99999 is a good one)
            page.wait_for_timeout(100)
            page.locator("#step-btn").click()
            page.wait_for_timeout(50)
    for selector, good in BOXES:
        enter(page, selector, good)

    real = Session.prefill_ids

    def slow_prefill(self, *args, **kwargs):
        time.sleep(1.5)  # the prefill still queued or running when Step arrives
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "prefill_ids", slow_prefill)
    page.locator("#prompt textarea").fill("The capital of France is")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-phase")).to_have_text("prefill: waiting", timeout=T)  # not the last run's
    page.locator("#step-btn").click()
    expect(page.locator("#status-phase")).to_have_text("decode step 1 (token 2 of 8)", timeout=30_000)
    expect(page.locator("#views-drawn-step")).to_have_attribute("data-step", "1", timeout=T)
    expect(page.locator(".ii-chip.ii-prompt")).to_have_count(
        int(page.locator("#token-count").get_attribute("data-prompt")), timeout=T)
    assert "France" in page.locator("#tokens").text_content()  # the new run was stepped, not the old one


@pytest.mark.parametrize("slow", ["prefill", "answer"])
def test_a_prefill_pressed_while_the_last_one_runs_runs_too(page: Page, app_url, monkeypatch, slow):
    """Prefill pressed again (a new prompt) while the last prefill is still pending: the new one runs once the
    last is done, and the page ends on it. Gradio drops a trigger of an event whose last submission is
    pending unless the event says otherwise, while the ask (not queued) has already told the server a prefill
    is coming. `slow`: where the last prefill is held up: in its forward (the new prompt was lost) or after it,
    while its answer is built (the page then also read "prefill: waiting" for good, and a Step waited for it)."""
    from inspector.session.session import Session
    from inspector.ui.handlers import Handlers

    cls, name = (Session, "prefill_ids") if slow == "prefill" else (Handlers, "queue_forward_ahead")
    real = getattr(cls, name)

    held = threading.Event()

    def slowly(self, *args, **kwargs):
        held.set()
        time.sleep(1.5)  # the first prefill still pending when the second Prefill is pressed
        return real(self, *args, **kwargs)

    goto(page, app_url)
    monkeypatch.setattr(cls, name, slowly)
    page.locator("#prompt textarea").fill("The capital of France is")
    page.locator("#prefill-btn").click()
    assert held.wait(T / 1000)  # in its forward, or past it (the server no longer expects a prefill)
    if slow == "prefill":
        expect(page.locator("#status-phase")).to_have_text("prefill: waiting", timeout=T)
    page.locator("#prompt textarea").fill("def fibonacci(n):")
    page.locator("#prefill-btn").click()
    expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)
    expect(page.locator("#tokens")).to_contain_text("onacci", timeout=T)  # the second prompt's run ("␣fib", "onacci")
    expect(page.locator("#tokens")).not_to_contain_text("France")
    monkeypatch.undo()
    page.locator("#step-btn").click()
    expect(page.locator("#status-phase")).to_have_text(re.compile(r"^decode step 1 "), timeout=30_000)


class HeldTabDraws:
    """From now on a tab's draw is answered only when the test lets it go: `open` opens a tab and returns once
    its views are drawn; `release` lets the answer go and waits until the page has it (it carries a key no slot
    shows, which the page keeps: `window.iiViews`)."""

    def __init__(self, page: Page, monkeypatch) -> None:
        from inspector.ui.handlers import Handlers

        real = Handlers.open_tab
        self.page, self.drawn, self.go = page, threading.Event(), threading.Event()

        def late(handlers, sid, tab, layer, head, order=None):
            views = real(handlers, sid, tab, layer, head, order)
            self.drawn.set()
            self.go.wait(T / 1000)
            return {**views, "test-late-answer": tab}

        monkeypatch.setattr(Handlers, "open_tab", late)

    def open(self, label: str) -> None:
        open_view(self.page, label)
        assert self.drawn.wait(T / 1000)

    def release(self, tab: str) -> None:
        self.go.set()
        self.page.wait_for_function(f"() => window.iiViews['test-late-answer'] === '{tab}'", timeout=T)
        self.drawn.clear()
        self.go.clear()


def test_a_chip_clicked_while_a_tab_draws_stays_selected(page: Page, app_url, monkeypatch):
    """A tab opened, then a chip clicked while the tab's draw is still on its way: the click's answer (the tab
    drawn again, with the selection) reaches the page first, the tab's draw after it. The page keeps what the
    click drew: the tab's draw was made before the selection changed, so its views are older (it took the
    chip's outline and the view's position away, while the position box still named the chip)."""
    goto(page, app_url)
    prefill(page, "What is gravity?")
    open_view(page, "Attention")
    expect(page.locator("#attention-info")).to_have_attribute("data-keys", re.compile(r"^\d+$"), timeout=T)
    held = HeldTabDraws(page, monkeypatch)
    held.open("Residual stream")
    click_chip(page, 3)
    see(page, "#resid-position")  # a plot out of sight is drawn when it comes into sight (inspector.ui.bundle)
    expect(page.locator("#resid-position")).to_contain_text(re.compile(r"Position 3 "), timeout=T)
    held.release("residual")
    expect(page.locator('.ii-chip.ii-selected[data-pos="3"]')).to_have_count(1)
    see(page, "#resid-position")
    expect(page.locator("#resid-position")).to_contain_text(re.compile(r"Position 3 "))
    expect(page.locator("#position input")).to_have_value("3")


def test_a_sampling_preview_answered_before_a_tab_draw_keeps_both(page: Page, app_url, monkeypatch):
    """A preview (a sampling control moved) is a newer state than a tab's draw made before it. When the draw
    comes after the preview, the page still shows it where the preview drew nothing (another tab's views),
    and keeps the preview where both drew (the Sampling tab)."""
    def preview_came(text: str) -> None:  # the Sampling tab's info as the page last received it
        page.wait_for_function("(t) => { const s = window.iiViews.samp_info || ''; "
                               "return s.includes('data-preview=\"1\"') && s.includes(t); }", arg=text, timeout=T)

    goto(page, app_url)
    prefill(page, "What is gravity?")
    n = int(page.locator("#token-count").get_attribute("data-prompt"))
    open_view(page, "Attention")
    step(page, 1)  # the Residual tab, not open, still shows step 0 (its newest position then: n - 1)
    expect(page.locator("#attention-info")).to_have_attribute("data-keys", str(n + 1), timeout=T)
    open_settings(page)
    held = HeldTabDraws(page, monkeypatch)
    held.open("Residual stream")
    page.locator("#temperature input[type=number]").fill("1.5")
    page.locator("#temperature input[type=number]").press("Tab")
    preview_came("temperature 1.5")
    held.release("residual")
    see(page, "#resid-position")
    expect(page.locator("#resid-position")).to_contain_text(re.compile(rf"Position {n} "))  # step 1's
    expect(page.locator("#resid-position")).not_to_contain_text(re.compile(rf"Position {n - 1} "))

    held.open("Sampling")
    page.locator("#seed input").fill("7")
    page.locator("#seed input").press("Enter")  # one preview (a temperature box sends two: release, input)
    preview_came("seed 7")
    held.release("sampling")
    expect(page.locator("#sampling-info")).to_have_attribute("data-preview", "1")
    expect(page.locator("#sampling-info")).to_contain_text("seed 7")
