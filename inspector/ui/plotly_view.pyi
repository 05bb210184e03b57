"""`PlotlyView`: a plotly figure drawn once into a `<div>` that stays on the page, then redrawn in place.

Handlers return `plotly.graph_objects.Figure`s as they would to `gr.Plot`; `postprocess` turns each
into plotly's JSON, and the browser calls `Plotly.react` on the same div for every new figure.

Why not `gr.Plot`: Gradio 6 wraps its plotly figure in a keyed block that re-mounts on every value, so
each step rebuilt every plot from an empty div (`newPlot`) and then re-laid it out (`Plots.resize`).
Measured on the 2-core dev machine, click to paint: a 270x120 heatmap 147 ms with `gr.Plot`, 89 ms
redrawn in place; 120 bars 100 ms against 82 ms (an empty update costs 45 ms).

plotly.js is the copy inside the installed `plotly` package (the version its figure JSON is written for),
served by Gradio as a static file: the page makes no external request. A div drawn while hidden (a
closed tab) is re-laid out when it first gets a size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import plotly
import plotly.graph_objects as go

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"

# `element`, `props` and `watch` are given by gr.HTML; the template (one empty div) never changes, so
# Gradio never touches the div again and plotly keeps its DOM between figures.
DRAW_JS = """
const div = element.querySelector('.ii-plot');
const config = {displaylogo: false, displayModeBar: 'hover', responsive: false};
const draw = () => {
  const value = props.value;
  if (!value) { window.Plotly.purge(div); return; }
  const fig = typeof value === 'string' ? JSON.parse(value) : value;
  window.Plotly.react(div, fig.data || [], fig.layout || {}, config);
};
// A figure drawn into a hidden tab has no width yet: lay it out again once the div is shown or resized.
new ResizeObserver(() => {
  if (div._fullLayout && div.clientWidth && div.clientWidth !== div._fullLayout.width) window.Plotly.Plots.resize(div);
}).observe(div);
watch('value', draw);
draw();
"""


def serve_plotly_js() -> str:
    """Let Gradio serve the bundled plotly.min.js; returns the `<head>` tag that loads it (page-relative)."""
    if not PLOTLY_JS.is_file():
        raise FileNotFoundError(f"plotly.js not found at {PLOTLY_JS}: reinstall the plotly package")
    gr.set_static_paths([PLOTLY_JS])
    return f'<script src="gradio_api/file={PLOTLY_JS.as_posix()}"></script>'

from gradio.events import Dependency

class PlotlyView(gr.HTML):
    """An output component for plotly figures, redrawn in place (`Plotly.react`) on every update."""

    def __init__(self, elem_id: str, **kwargs: Any) -> None:
        super().__init__(value=None, html_template='<div class="ii-plot"></div>', js_on_load=DRAW_JS,
                         head=serve_plotly_js(), apply_default_css=False, padding=False, elem_id=elem_id,
                         elem_classes="ii-plot-view", **kwargs)

    def postprocess(self, value: go.Figure | dict | str | None) -> str | None:
        """A figure (or its dict / JSON) -> plotly JSON; numpy arrays go as base64 typed arrays."""
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, dict):
            value = go.Figure(value, _validate=False)
        return value.to_json(validate=False)
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component