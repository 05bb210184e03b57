"""The guided tour on the page: its facts from the loaded model, its floating panel, and its button.

`tour_facts(loaded)` gives `inspector.viz.tour.TourFacts`: the model's numbers, the KV bytes per token from
the one formula (`inspector.engine.kv_cache.kv_bytes`) and the precision note. The tour's text is a view
like the others (key "tour", `inspector.ui.render`): every prefill and step sends it with that step's numbers.
`build_tour_panel()` lays out the panel (a floating card: Back / Next / Close around the view slot) and
`build_tour_button()` the "Tour ?" button that reopens it. static/tour.js does the rest in the browser: one
step shown at a time, open on a browser's first visit until it is closed (remembered in localStorage), a "?"
beside each view's caption that opens the tour at that view's step, Escape closes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from inspector.serving.roofline import peaks_directory, stored_peaks
from inspector.session.budget import kv_bytes
from inspector.ui.bundle import ViewSlot
from inspector.viz.precision import precision_note
from inspector.viz.tour import TourFacts

STATIC = Path(__file__).resolve().parents[2] / "static"
TOUR_JS = (STATIC / "tour.js").read_text(encoding="utf-8")
TOUR_CSS_FILE = STATIC / "tour.css"

NAV_HTML = ('<div class="ii-tour-nav"><b class="ii-tour-title">Tour of one step</b>'
            '<button id="tour-back" type="button" title="previous step">← Back</button>'
            '<button id="tour-next" type="button" title="next step">Next →</button>'
            '<button id="tour-close" type="button" title="close the tour (the Tour ? button opens it again)">'
            'Close ✕</button></div>')


def tour_facts(loaded: Any, weight_bytes: int = 0) -> TourFacts:
    """The model numbers the tour names, every one from the config; the KV bytes per token by the KV cache's
    own formula; the weights' bytes; this machine's ridge point when its roofline peaks are already stored
    (the Serving lab measures them: none are measured at start-up)."""
    cfg = loaded.config
    elem = loaded.dtype.itemsize  # bytes per number the cache holds (it is allocated in the model's dtype)
    dtype = str(loaded.dtype).replace("torch.", "")
    peaks = None
    if getattr(loaded, "weights_path", None):
        peaks = stored_peaks(peaks_directory(loaded.weights_path), loaded.dtype, getattr(loaded, "device", "cpu"))
    return TourFacts.from_config(cfg, elem, kv_bytes(cfg, 1, elem), dtype,
                                 precision_note(getattr(loaded, "source_format", "") or "", dtype,
                                                getattr(loaded, "source_types", None)),
                                 weight_bytes=weight_bytes, ridge=peaks.ridge if peaks is not None else None)


def build_tour_panel() -> None:
    """The floating tour card (hidden until static/tour.js opens it); its text is the bundle's "tour" view."""
    with gr.Column(elem_id="tour", elem_classes="ii-tour"):
        gr.HTML(NAV_HTML, js_on_load=TOUR_JS, elem_id="tour-nav", padding=False, container=False)
        ViewSlot("tour", "tour-view")


def build_tour_button() -> gr.Button:
    """The button that opens the tour again (handled in the browser only: no server event)."""
    return gr.Button("Tour ?", elem_id="tour-btn", size="sm", min_width=60)
