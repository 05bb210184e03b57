"""`PlotlyView`: figures become plotly JSON for the in-place redraw; plotly.js is served from the plotly package."""

from __future__ import annotations

import json

import numpy as np

from inspector.ui.plotly_view import PLOTLY_JS, PlotlyView, serve_plotly_js
from inspector.viz.common import figure


def test_postprocess_turns_figures_into_plotly_json():
    view = PlotlyView("test-plot")
    z = np.arange(6, dtype=np.uint8).reshape(2, 3)
    fig = figure([{"type": "heatmap", "z": z}], "A title", 300)
    out = json.loads(view.postprocess(fig))
    assert out["layout"]["title"]["text"] == "A title" and out["layout"]["height"] == 300
    heat = out["data"][0]
    assert heat["type"] == "heatmap"
    assert heat["z"]["dtype"] == "u1" and heat["z"]["shape"] == "2, 3"  # numpy goes as a base64 typed array
    as_dict = json.loads(view.postprocess(fig.to_plotly_json()))
    assert as_dict["layout"]["title"]["text"] == "A title"
    assert view.postprocess(None) is None
    assert view.postprocess('{"data": []}') == '{"data": []}'  # already JSON: passed through


def test_the_page_loads_plotly_js_from_the_plotly_package():
    tag = serve_plotly_js()
    assert PLOTLY_JS.is_file() and PLOTLY_JS.stat().st_size > 1_000_000
    assert tag == f'<script src="gradio_api/file={PLOTLY_JS.as_posix()}"></script>'
    import gradio.utils

    assert gradio.utils.is_static_file(PLOTLY_JS)  # served as is, never copied to Gradio's cache
    view = PlotlyView("p2")
    assert view.head == tag and "Plotly.react" in view.js_on_load
