"""The page's field table and its parsers without a browser: what Gradio hands over (None for an emptied
box, text, NaN, out-of-range numbers) reaches our parsers untouched, and every handler that reads a number
answers a bad one with one status line naming the field, never an exception."""

from __future__ import annotations

import math

import gradio as gr
import pytest

from inspector.errors import InputError
from inspector.ui import fields
from inspector.ui.labs import serving as st
from inspector.ui.labs.serving_memory import MemoryCalculator
from inspector.ui.refusals import keep_sid, refuses
from inspector.viz.common import status_line_html
from tests.support.lab_context import make_ctx
from tests.support.handlers import make, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

GOOD = (0.0, 0, 1.0, 0.0, 0)  # temperature, top-k, top-p, min-p, seed
BAD = [None, "", "abc", math.nan, math.inf, "1e309", -5, 99999]  # what a box can send, and out of range


@pytest.mark.parametrize("component", [fields.FreeNumber(0, precision=0), fields.FreeSlider(0, 2, 1, step=1)])
def test_free_components_hand_over_what_the_browser_sent(component):
    """Gradio's own Slider.preprocess compares None with the minimum (TypeError) and rounds NaN; ours
    passes every value on, and the page still draws the built-in component."""
    for value in (None, "abc", math.nan, -5, 99999, 2**70):
        out = component.preprocess(value)
        assert out is value or (isinstance(value, float) and math.isnan(out))
    assert component.get_block_name() in ("number", "slider")
    with pytest.raises(TypeError):
        gr.Slider(0, 2, 1).preprocess(None)  # the crash the Free components avoid


def test_sliders_show_their_fields_range():
    s = fields.slider(fields.DRAFT_LEN, 5, 1, "draft length k", "k")
    assert (s.minimum, s.maximum, s.value) == (1, 16, 5)
    one = fields.slider(fields.Bound("L", True, 1, 1), 1, 1, "L", "l")  # a slider needs min < max
    assert (one.minimum, one.maximum) == (1, 2)


@pytest.mark.parametrize("index, name", list(enumerate(["temperature", "top-k", "top-p", "min-p", "seed"])))
def test_sampling_params_name_the_bad_field(index, name):
    for bad in BAD:
        args = list(GOOD)
        args[index] = bad
        if name == "seed" and bad == 99999:
            assert fields.sampling_params(*args).seed == 99999  # a seed has no end
            continue
        with pytest.raises(InputError, match=f"^{name} (must be|is empty)"):
            fields.sampling_params(*args)
    assert fields.sampling_params(2.0, 200, 1, 0.5, 2**70).seed == 2**70
    with pytest.raises(InputError, match=r"temperature must be 0 or a number in \[1e-06, 2\]"):
        fields.sampling_params(2.05, 0, 1, 0, 0)  # the slider's end, where the engine would take more
    with pytest.raises(InputError, match="top-k must be a whole number from 0 to 200"):
        fields.sampling_params(0, 201, 1, 0, 0)


def test_release_check_reports_only_bad_values():
    check = fields.release_check(fields.MAX_BATCH, status_line_html)
    assert check(4) == gr.skip()
    for bad, text in [(None, "max batch is empty"), (99999, "got 99999"), (-5, "got -5"), ("abc", "got &#x27;abc&#x27;")]:  # HTML-escaped
        out = check(bad)
        assert 'data-error="1"' in out and text in out


def test_refuses_wraps_plain_and_generator_handlers():
    class Owner:
        def refusal(self, message, sid=None):
            return {"status": ("refused", message, sid)}

        @refuses
        def plain(self, sid, x):
            if x < 0:
                raise InputError("x must be >= 0\nsecond line")
            return {"status": "ok"}

        @refuses
        def stream(self, sid, n):
            yield 1
            fields.MAX_BATCH.parse(n)
            yield 2

        @refuses(lead=keep_sid)
        def with_sid(self, sid, x):
            raise ValueError(f"bad {x}")

    o = Owner()
    assert o.plain("s", 1) == {"status": "ok"} and o.plain("s", -1) == {"status": ("refused", "x must be >= 0", "s")}
    assert list(o.stream("s", 3)) == [1, 2]
    assert list(o.stream("s", None)) == [1, {"status": ("refused", "max batch is empty: enter a whole number from 1 "
                                                              "to 16", "s")}]
    assert o.with_sid("s", 2) == ("s", {"status": ("refused", "bad 2", "s")})


def test_page_handlers_refuse_bad_numbers_in_the_status_line(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    sid = store.new_id()
    for bad in BAD:
        out = h.prefill(sid, "Hello", False, "", *GOOD, bad, 0, 0)  # max new tokens
        assert "max new tokens" in status(out[1:]) and "ii-error" in status(out[1:])
    sid, *_ = h.prefill(sid, "Hello", False, "", *GOOD, 4, 0, 0)
    for bad in BAD:
        for args, name in [((bad, 0, 0), "selected position"), ((-1, bad, 0), "layer"), ((-1, 0, bad), "query head")]:
            assert f"{name} " in status(h.select(sid, *args)), (bad, name)
        out = h.step(sid, bad, *GOOD[1:], 0, 0)
        assert "temperature" in status(out) and set(out) == {"status"}
        out = list(h.play(sid, *GOOD[:4], -1 if bad == 99999 else bad, 0, 0))[-1]  # seed (99999 is one)
        assert "seed" in status(out)
        assert "top-p" in h.preview(sid, 0, 0, bad, 0, 0)["status"]
        assert "min-p" in status(h.resample(sid, 0, 0, 1, bad, 0, 0, 0))
    assert "selected position must be a whole number from -1 to" in status(h.select(sid, 99999, 0, 0))
    h.show_tab("attention")(sid, 0, 0)
    assert "layer must be a whole number from 0 to 1, got 5" in status(h.step(sid, *GOOD, 5, 0))  # never clamped
    out = h.step(sid, *GOOD, 0, 0)
    assert "ii-error" not in status(out) and store.get(sid).session.generated_ids  # the session goes on


def test_lab_tab_parsers(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    spt, serving = ctx.panels["speculative"], ctx.panels["serving"]
    for bad in BAD:
        out = spt.start(sid, "ngram", 1, bad, "Hello", False, "", 4, *GOOD)
        assert "draft length k" in out["status"] and 'data-error="1"' in out["status"]
        assert "early-exit layer L" in spt.start(sid, "early-exit", bad, 2, "Hello", False, "", 4, *GOOD)["status"]
        far = 10**6 if bad == 99999 else bad  # past the end of the pool and calculator fields too
        out = serving.load(sid, "Hello", 2, 4, far, 1, False, "", 4, *GOOD)
        assert "pool blocks" in out["status"]
        for args, name in [((far, 8, 80), "context (tokens)"), ((4096, far, 80), "batch"), ((4096, 8, far), "memory (GiB)")]:
            out = MemoryCalculator(None).memory_view("HuggingFaceTB/SmolLM2-135M", args[0], args[1], "bf16", args[2])
            assert name in out["line"]
    with pytest.raises(InputError, match="request 1: arrival step must be a whole number from 0 to 2000"):
        st.parse_requests("99999 | 4 | Hello", 4)
    assert st.parse_requests("Hi\n0 | 99999999999999999999999 | Hello", 4)[1][1] == 99999999999999999999999
    out = serving.load(sid, "Hi\n0 | 99999999999999999999999 | Hello", 2, 4, 0, 1, False, "", 4, *GOOD)
    assert "max new tokens is capped" in out["status"]  # the server's cap, checked by admission
    assert fields.quant_step_bound(3).allowed == "a whole number from 0 to 2"
