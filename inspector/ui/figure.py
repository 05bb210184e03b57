"""`Figure`: a plotly figure that is an event's own output (a lab's chart, the head atlas), drawn with the page's
one plotly.js, in place of `gr.Plot`.

Why: `gr.Plot` draws with Gradio's own bundled copy of plotly.js (its PlotlyPlot chunk), loaded and compiled the
first time a tab holding one opens: on this machine, opening the Attention tab (the head atlas holds four) took
1.4 s, 1.2 s of it script, against the copy the view bundle has already loaded (`inspector.ui.bundle`). A
`Figure` is a `gr.HTML` whose value is the figure's JSON, drawn in place with `Plotly.react` once that copy has
loaded (`window.iiPlotly`, the bundle's loader), and laid out again when its box changes width.

What it draws is what `gr.Plot` drew: the same figure (a handler returns a `go.Figure` or a plain dict, as it
did for `gr.Plot`), the same plotly.js DOM (`.js-plotly-plot`, `plotly_click` on it), the page's plot config.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from inspector.ui.bundle import FOLLOW_WIDTH_JS, PLOT_CONFIG

# The figure's script (`element`, `props`, `watch` are given by gr.HTML). The view bundle's script, mounted with
# the page, starts loading plotly.js (`window.iiPlotly`); a figure mounted first waits until it has.
FIGURE_JS = """
const div = element.querySelector('.ii-figure');
const config = %s;
const plotly = () => new Promise((resolve) => {
  const look = () => (window.iiPlotly ? window.iiPlotly.then(resolve) : setTimeout(look, 20));
  look();
});
let drawn = null;  // the value last drawn: a redraw of the same value is skipped
const draw = async () => {
  const Plotly = await plotly();
  const value = props.value || '';
  if (value === drawn) return;
  drawn = value;
  if (!value) {
    Plotly.purge(div);
    return;
  }
  const fig = JSON.parse(value);
  Plotly.react(div, fig.data || [], fig.layout || {}, config);
};
watch('value', draw);
draw();
const plot = div;
""" + FOLLOW_WIDTH_JS


class Figure(gr.HTML):
    """A plotly figure output (a `go.Figure`, a plain figure dict or None), drawn by the page's plotly.js."""

    def __init__(self, value: Any = None, **kwargs: Any) -> None:
        # laid out as gr.Plot is: in a box, at least 160 px wide (static/app.css `.ii-figure-box`)
        super().__init__(value=value, html_template='<div class="ii-figure"></div>',
                         js_on_load=FIGURE_JS % json.dumps(PLOT_CONFIG), apply_default_css=False, padding=False,
                         container=True, elem_classes="ii-figure-box", **kwargs)

    def postprocess(self, value: Any) -> str | None:
        """A figure -> its plotly JSON (numpy arrays as base64); None -> nothing drawn."""
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, dict):
            value = go.Figure(value, _validate=False)
        return value.to_json(validate=False)
