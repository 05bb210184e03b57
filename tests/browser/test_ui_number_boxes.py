"""Every number box of the page, typed into in a real browser at 1280 px and on a 390 px phone: bad values
are named on the page, never a traceback in the server's log, and the session goes on. The main page, its
settings panel, the head atlas, Beams and Serving's chunk box here; the other labs' boxes in
test_ui_number_boxes_labs.py.

The app is the browser tests' own, served in this process (`app_url`); what the process prints while a test
runs, where Gradio prints the traceback of an event that failed (a ComponentProcessingError from its own
preprocessing, or an exception from a handler), is the log the tests read (tests/support/number_boxes.py).

Each number box gets: empty, `abc`, `nan`, `inf`, `1e309` (Chromium leaves all five empty in a number input:
the server gets None), `-5`, and a value past the end. A text box that takes a number (the settings panel's
decoding boxes, the Interventions lab) gets empty, `-5`, `abc` and `1e309` as typed; `-5` is skipped where
it is a good value (a scale factor, a steering strength). A slider's number box sends the typed value in a
`release` event when left, so sliders are checked on leaving the box; Gradio then clamps the box, and the
page's script puts the typed value back, so the tab's action (Prefill, Start, Load) is sent what was typed
(checked on the request). A number box is checked by the tab's action. The values are ordered so that no two in a row
give the same message: each expectation waits for the answer to its own value. A click that lands while
the previous event of that button is still finishing is dropped by Gradio (trigger_mode "once"), so an
action is repeated until its answer shows (`until`), the value typed again with each press: a box typed into
just after its tab opened can be drawn again with its old value, which every later press would send.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, goto, open_settings, open_view, prefill
from tests.support.number_boxes import (TEXT, ServedApp, assert_no_traceback, check_slider, click,  # noqa: F401
                                        enter, enter_and_click, expected, leave, named, sent, server, text_box,
                                        type_and_leave, until, values, width)


pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_main_page_boxes(page: Page, server: ServedApp):
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
            until(page, enter_and_click(page, selector, v, "#prefill-btn"), msg, expected(name, v, past_end_message))
        enter(page, selector, "4" if "max" in selector else "0")

    def good_prefill() -> None:  # both boxes' good values typed again with each press
        enter(page, "#max-new-tokens input", "4")
        enter(page, "#seed input", "0")
        page.locator("#prefill-btn").click()
    # pressed again only after 20 s: each press asks for a prefill anew, and the status line shows the newest ask
    until(page, good_prefill, "#status-phase", "prefill done", "to_have_text", 20_000)
    # Play's speed (tokens/s), checked by Play
    for v in values("99"):
        until(page, enter_and_click(page, "#play-speed input", v, "#play-btn"), msg, expected("speed (tokens/s)", v))
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
        until(page, lambda: (enter(page, "#position input", v), page.locator("#position input").press("Enter")), msg,
              expected("selected position", v))
    enter(page, "#position input", "-1")
    page.locator("#position input").press("Enter")

    # the session goes on: prefill and step with good values
    until(page, click(page, "#prefill-btn"), "#status-phase", "prefill done", "to_have_text", 20_000)
    until(page, click(page, "#step-btn"), "#status-phase", "decode step 1 (token 2 of 4)", "to_have_text", 20_000)
    expect(page.locator("#status-message.ii-error")).to_have_count(0)
    assert_no_traceback(server)


def test_settings_panel_decoding_boxes(page: Page, server: ServedApp):
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


def test_beams_and_serving_chunk_boxes(page: Page, server: ServedApp):
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
        until(page, enter_and_click(page, "#serving-chunk input", v, "#serving-load"), "#serving-status",
              expected("prefill chunk", v))
    enter(page, "#serving-chunk input", "0")
    until(page, click(page, "#serving-load"), "#serving-status", "queued")
    assert_no_traceback(server)


def test_head_atlas_boxes(page: Page, server: ServedApp):
    """The Attention view's head atlas: the probe's boxes, checked by Compute, and top-k, checked by Ablate
    (every value refused before any model work)."""
    goto(page, server.url)
    open_view(page, "Attention")
    status = "#heads-status"
    for selector, name, past_end, good in [("#heads-n input", "probe length n", "99999", "16"),
                                           ("#heads-k-probes input", "probes K", "99999", "2"),
                                           ("#heads-seed input", "seed", "1.5", "0")]:
        for v in values(past_end):
            until(page, enter_and_click(page, selector, v, "#heads-compute"), status, expected(name, v))
        enter(page, selector, good)
    for v in values("99999"):
        until(page, enter_and_click(page, "#heads-top-k input", v, "#heads-ablate"), status, expected("top-k", v))
    enter(page, "#heads-top-k input", "2")
    assert_no_traceback(server)
