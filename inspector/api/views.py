"""The page's views of a `Run`, dispatched through the one registry of views (`inspector.viz.registry`),
with a run's records up to the forward asked for.

`figure(run, view, step)` returns a view's plotly Figure (`View.figure`); `html(run, view, step)` the HTML the
page shows beside it (`View.html`), wrapped in `Html` so a notebook renders it inline. Importing this module
imports plotly (the viz builders); `inspector` imports it only when a view is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import plotly.graph_objects as go

from inspector.api.args import index
from inspector.errors import InputError
from inspector.validate import shown
from inspector.viz.registry import VIEWS, Picked, newest_position

if TYPE_CHECKING:
    from inspector.session.records import ForwardRecord


class Run(Protocol):
    """What the views read of a run (`inspector.api.run.Run`, which imports this module: a protocol, so no
    import goes back)."""

    session: Any
    model: Any
    prompt_ids: list[int]
    generated_ids: list[int]
    pieces: list[str]
    records: list[ForwardRecord]

    def forward_index(self, step: int) -> int: ...
    def logit_lens(self, step: int = -1) -> Any: ...
    def sample(self, step: int = -1) -> Any: ...
    def _layer(self, layer: int) -> int: ...
    def _head(self, head: int) -> int: ...


class Html(str):
    """HTML from the page's builders; a notebook shows it inline (`_repr_html_`), `str(h)` is the markup."""

    def _repr_html_(self) -> str:
        return str(self)


def pick(run: Run, step: int, position: int | None) -> Picked:
    """Forward `step` of `run` and the position asked (default: that forward's newest; negative: from the end)."""
    k = run.forward_index(step)
    newest = newest_position(run.records[k])
    chosen = position is not None  # the page's selected position (decode rows) vs the prefill pattern
    return Picked(run, k, newest if position is None else index(position, "position", newest + 1), chosen)


def figure(run: Run, view: str, step: int = -1, *, layer: int = 0, head: int = 0,
           position: int | None = None) -> go.Figure | Html:
    """The page's figure `view` after forward `step` (see `Run.figure`): the registry's `View.figure`."""
    v = VIEWS.get(view) if isinstance(view, str) else None
    if v is None or v.figure is None:
        names = [v.key for v in VIEWS.values() if v.figure and v.applies(run.session.config)]
        raise InputError(f"unknown view {shown(view)}: this model's views are {', '.join(names)}")
    drawn = v.figure(pick(run, step, position), layer, head)
    return Html(drawn) if isinstance(drawn, str) else drawn


def html(run: Run, view: str, step: int = -1, *, position: int | None = None) -> Html:
    """The page's HTML `view` after forward `step` (see `Run.html`): the registry's `View.html`."""
    v = VIEWS.get(view) if isinstance(view, str) else None
    if v is None or v.html is None:
        names = [v.key for v in VIEWS.values() if v.html and v.applies(run.session.config)]
        raise InputError(f"unknown HTML view {shown(view)}: this model's HTML views are {', '.join(names)}")
    return Html(v.html(pick(run, step, position)))
