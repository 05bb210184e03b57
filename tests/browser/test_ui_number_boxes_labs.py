"""The labs' number boxes (Speculative, Serving, Quantization, KV policies, Interventions), typed into in a real
browser at 1280 px and on a 390 px phone, as tests/browser/test_ui_number_boxes.py does for the main page (its
docstring says how each kind of box is tried, and where the log they read comes from): a file of its own.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, choose, goto, open_view, prefill
from tests.support.number_boxes import (TEXT, ServedApp, assert_no_traceback, check_slider, click,  # noqa: F401
                                        enter, enter_and_click, expected, leave, named, server, text_box, until,
                                        values, width)

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_lab_tab_boxes(page: Page, server: ServedApp):
    goto(page, server.url)
    page.locator("#prompt textarea").fill("Hi")
    enter(page, "#max-new-tokens input", "4")

    open_view(page, "Speculative")
    status = "#speculative-status"
    # the layer counts (and Start refuses a bad one) only with the early-exit drafter: with prompt lookup the
    # refusal shown would be the box's own, raced by Start's "prefill done"
    choose(page, "speculative-drafter", "early-exit")
    for selector, name, good in [("#speculative-layer", "early-exit layer L", "20"), ("#speculative-k", "draft length k", "2")]:
        check_slider(page, f"{selector} input[type=number]", name, status, "99999", action="#speculative-start")
        leave(page, f"{selector} input[type=number]", good)()
    choose(page, "speculative-drafter", "ngram")
    until(page, click(page, "#speculative-start"), status, "prefill done")
    until(page, click(page, "#speculative-round"), status, "round 1", retry_ms=T)

    open_view(page, "Serving")
    status = "#serving-status"
    for selector, name, good in [("#serving-max-batch", "max batch", "4"), ("#serving-n", "continuations per request", "1")]:
        check_slider(page, f"{selector} input[type=number]", name, status, "99999", action="#serving-load",
                     sent_with="The capital of France")
        leave(page, f"{selector} input[type=number]", good)()
    for v in values("999999"):
        until(page, enter_and_click(page, "#serving-pool input", v, "#serving-load"), status,
              expected("pool blocks", v))
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


def test_kv_policies_boxes(page: Page, server: ServedApp):
    goto(page, server.url)
    page.locator("#prompt textarea").fill("The capital of France is")
    enter(page, "#max-new-tokens input", "3")
    open_view(page, "KV policies")
    status = "#kvpolicy-status"
    choose(page, "kvpolicy-policy", "sinks")
    for v in ["", "-5", "abc", "0", "1e309"]:
        until(page, enter_and_click(page, "#kvpolicy-budget input", v, "#kvpolicy-run"), status,
              expected("budget", v, "budget must be a whole number >= 1"))
    enter(page, "#kvpolicy-budget input", "8")
    for v in ["", "-5", "abc", "8", "1e309"]:
        until(page, enter_and_click(page, "#kvpolicy-sinks input", v, "#kvpolicy-run"), status,
              expected("sinks", v, "sinks must be from 1 to budget - 1 (7)"))
    enter(page, "#kvpolicy-sinks input", "2")
    until(page, click(page, "#kvpolicy-run"), status, "tokens generated", retry_ms=T)
    for selector, name in [("#kvpolicy-layer", "layer"), ("#kvpolicy-head", "KV head")]:
        check_slider(page, f"{selector} input[type=number]", name, status, "99999")
        leave(page, f"{selector} input[type=number]", "0")()
    expect(page.locator(f"{status} .ii-error")).to_have_count(0, timeout=T)

    page.get_by_text("FlashAttention tiles: one head of the prompt's prefill").click()
    for selector, name in [("#kvpolicy-flash-layer", "layer"), ("#kvpolicy-flash-head", "query head")]:
        box = f"{selector} input[type=number]"
        for v in values("99999"):  # no release handler: the button names the value
            # typed again with each press: the panel just unfolded can draw a box again with its old value
            until(page, enter_and_click(page, box, v, "#kvpolicy-flash-run"), status, expected(name, v))
        enter(page, box, "0")
        until(page, click(page, "#kvpolicy-flash-run"), status, "tile", retry_ms=T)
    check_slider(page, "#kvpolicy-flash-tile input[type=number]", "tile", status, "99999")
    assert_no_traceback(server)


def test_interventions_boxes(page: Page, server: ServedApp):
    goto(page, server.url)
    prefill(page, "The capital of France is", max_new=3)
    open_view(page, "Interventions")
    status = "#iv-status"
    # each box with the point and operation that use it; a scale factor or a steering strength may be -5
    for point, op, elem_id, name, good in [
        ("head output (attn.hook_z)", "zero", "iv-layer", "layer", "0"),
        ("head output (attn.hook_z)", "zero", "iv-head", "head", "0"),
        ("head output (attn.hook_z)", "scale", "iv-factor", "factor", "0.5"),
        ("block attention query → key", "zero", "iv-query", "query position", "1"),
        ("block attention query → key", "zero", "iv-key", "key position", "0"),
        ("steer at resid_pre", "zero", "iv-alpha", "steering alpha", "4.0"),
    ]:
        choose(page, "iv-point", point)
        choose(page, "iv-op", op)
        for v in TEXT:
            if v == "-5" and elem_id in ("iv-factor", "iv-alpha"):
                continue
            page.locator(text_box(elem_id)).fill(v)
            until(page, click(page, "#iv-apply"), status, named(name, v))
        page.locator(text_box(elem_id)).fill(good)
    for elem_id, name, button in [("iv-branch", "branch", "#iv-switch"), ("iv-cmp-a", "branch A", "#iv-compare"),
                                  ("iv-cmp-b", "branch B", "#iv-compare"), ("iv-step", "step", "#iv-attribute")]:
        good = page.locator(text_box(elem_id)).input_value()
        for v in TEXT:
            page.locator(text_box(elem_id)).fill(v)
            until(page, click(page, button), status, named(name, v))
        page.locator(text_box(elem_id)).fill(good)
    until(page, click(page, "#iv-attribute"), status, "attribution of step", retry_ms=T)  # the lab goes on
    assert_no_traceback(server)
