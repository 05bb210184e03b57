"""A view is drawn once: one draw function and one line in the registry of views (`inspector.viz.registry`)
reach the API (`run.figure`), the page (its tab, laid out and drawn) and the guided tour. The view here,
"confidence", is added by this test only."""

from __future__ import annotations

import re

import plotly.graph_objects as go
import pytest

import inspector
from inspector.ui import registry
from inspector.ui.app import build_app
from inspector.ui.tour_panel import tour_facts
from inspector.viz import registry as views
from inspector.viz import tour
from inspector.viz.common import esc
from tests.support.handlers import SAMPLING, make
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)

TOUR_TEXT = "The model's top probability at each step. A low one marks a step where it hesitated."


def confidence_figure(at: views.Picked, layer: int, head: int) -> go.Figure:
    """The top-1 probability (softmax of the logits) of every step's draw up to the forward picked."""
    drawn = [r for r in at.records if r.sample is not None]
    return go.Figure(go.Scatter(x=[r.step for r in drawn], y=[max(c.prob_raw for c in r.sample.candidates)
                                                               for r in drawn]))


CONFIDENCE = views.View("confidence", "Confidence", "tab-confidence", confidence_figure, tour=TOUR_TEXT)


@pytest.fixture
def confidence(monkeypatch):
    monkeypatch.setitem(views.VIEWS, "confidence", CONFIDENCE)  # the one line a new view adds
    return CONFIDENCE


def test_an_added_view_reaches_run_figure(confidence, tiny_llama_dir):  # noqa: F811
    run = inspector.load(tiny_llama_dir).prefill("Hello world", temperature=0.7, seed=3, max_new_tokens=4)
    run.step(2)
    fig = run.figure("confidence")
    assert list(fig.data[0].x) == [0, 1, 2]
    assert fig.data[0].y[2] == max(c.prob_raw for c in run.sample(2).candidates)
    assert list(run.figure("confidence", step=1).data[0].x) == [0, 1]  # drawn from the run at that step
    with pytest.raises(inspector.InputError, match="unknown HTML view 'confidence'"):
        run.html("confidence")  # it registered no HTML


def test_an_added_view_is_a_tab_of_the_page_drawn_from_its_run(confidence, tiny_loaded):  # noqa: F811
    assert [cls.key for cls in registry.page_views()][-1] == "confidence"
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 6, 0, 0)[0]
    h.step(sid, *SAMPLING, 0, 0)
    drawn = h.show_tab("confidence")(sid, 0, 0)["confidence_fig"]  # its tab opened: its figure drawn
    records = store.get(sid).session.records
    assert list(drawn.data[0].x) == [0, 1]
    assert drawn.data[0].y[1] == max(c.prob_raw for c in records[1].sample.candidates)

    demo = build_app(tiny_loaded)
    tabs = {b.elem_id: b for b in demo.blocks.values() if type(b).__name__ == "Tab"}
    assert tabs["tab-confidence"].label == "Confidence"
    assert "confidence-figure" in {getattr(b, "elem_id", None) for b in demo.blocks.values()}


def test_an_added_view_with_tour_text_has_a_tour_step(confidence, tiny_loaded):  # noqa: F811
    html = tour.tour_html(tour_facts(tiny_loaded), None)
    steps = re.findall(r'data-stage="(\w+)" data-i="\d+" data-tab="([^"]*)" data-tab-id="([^"]*)"', html)
    assert ("confidence_view", "Confidence", "tab-confidence") in steps
    assert steps[-1][0] == "keys"  # before the shortcuts and glossary
    assert esc(TOUR_TEXT) in html and tour.view_steps()["tab-confidence"] == "confidence_view"


def test_the_tour_and_the_strip_name_the_registrys_tabs():
    """The tour's view steps and the pipeline strip's links are the registry's titles and tab ids."""
    for key, _title, view in tour.STEPS:
        if view:
            assert tour.tab_of(view) == (views.VIEWS[view].title, views.VIEWS[view].tab_id)
    assert set(tour.VIEW_STEP) == {views.VIEWS[v].tab_id for *_, v in tour.STEPS if v}
    page_tabs = {cls.key for cls in registry.page_views()}
    assert {v.key for v in views.tabs()} == page_tabs  # every registered tab is on the page, no other view
