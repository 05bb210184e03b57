"""New run = fresh selections: a Prefill starts with layer 0, head 0 and the newest position, unless pinned.

The attention view's layer and head sliders and the selected-position box keep their values across runs
otherwise, so a position chosen in one run would select a different token (or none) in the next.
`fresh_selections(pinned)` gives the controls' values for a new run (runs before the prefill, so the new
run's views are drawn with them); with "pin" ticked they stay, and the prefill selects a pinned position in
the new run with `pinned_position` (the server's selection starts fresh with every run), so the new run's
first views are drawn with it.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.ui.fields import position_bound

FRESH = (0, 0, -1)  # layer, query head, selected position (-1 = the newest)


def build_pin() -> gr.Checkbox:
    """The "pin" box: keep the selected layer, head and position when a new run starts."""
    return gr.Checkbox(False, label="pin selections (layer, head, position) across runs", elem_id="pin-selections",
                       min_width=160)


def fresh_selections(pinned: Any) -> tuple:
    """(layer, head, position) for a new run: the fresh ones, or left as they are when pinned."""
    return tuple(gr.skip() for _ in FRESH) if pinned else FRESH


def pinned_position(pinned: Any, position: Any, newest: int) -> int | None:
    """The position a new run starts with selected, whose newest position is `newest`: the pinned one, or None
    (the newest) when not pinned or pinned at -1. A pinned position the new run does not reach raises the
    position box's NumberError."""
    if not pinned or position in (None, -1, "-1"):
        return None
    pos = position_bound(newest).parse(position)
    return None if pos < 0 else pos
