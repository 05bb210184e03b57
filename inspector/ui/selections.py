"""New run = fresh selections: a Prefill starts with layer 0, head 0 and the newest position, unless pinned.

The attention view's layer and head sliders and the selected-position box keep their values across runs
otherwise, so a position chosen in one run would select a different token (or none) in the next.
`fresh_selections(pinned)` gives the controls' values for a new run (runs before the prefill, so the new
run's views are drawn with them); with "pin" ticked they stay, and `reselect_pinned` applies a pinned
position to the new run once its prefill is done (the server's selection starts fresh with every run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

FRESH = (0, 0, -1)  # layer, query head, selected position (-1 = the newest)


def build_pin() -> gr.Checkbox:
    """The "pin" box: keep the selected layer, head and position when a new run starts."""
    return gr.Checkbox(False, label="pin selections (layer, head, position) across runs", elem_id="pin-selections",
                       min_width=160)


def fresh_selections(pinned: Any) -> tuple:
    """(layer, head, position) for a new run: the fresh ones, or left as they are when pinned."""
    return tuple(gr.skip() for _ in FRESH) if pinned else FRESH


def reselect_pinned(select: Callable[..., dict]) -> Callable[..., dict]:
    """After a prefill: a pinned position (not -1) is selected in the new run; otherwise nothing changes."""
    def handler(sid: Any, pinned: Any, position: Any, layer: Any, head: Any) -> dict:
        if not pinned or position in (None, -1, "-1"):
            return {}
        return select(sid, position, layer, head)
    return handler
