"""The panel of a registered view that has no panel of its own (`inspector.viz.registry`): its figure and its
HTML, drawn from the page's run by the view's own functions, one slot each.

`PageRun` is what a view's draw functions read of the page's run (the API's `Run` gives the same): the
session, its records and pieces, its prompt and generated ids, a step's sample and logit lens, checked layer
and head indices. The page has no API `Model`, so `model` is None (a view that needs the weights' inventory
has a panel of its own).
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError
from inspector.ui.panel import Slot, ViewPanel
from inspector.ui.visitors import Visitor
from inspector.viz.common import empty_figure
from inspector.viz.registry import Picked, View

HINT = "Type a prompt and press Prefill"


class PageRun:
    """The page's run as a view's draw functions read it (see the module docstring)."""

    model = None

    def __init__(self, session: Any) -> None:
        self.session = session
        self.records = session.records
        self.pieces = session.token_pieces()
        self.prompt_ids = list(session.prompt_ids)
        self.generated_ids = list(session.generated_ids)

    def sample(self, k: int) -> Any:
        sample = self.records[k].sample
        if sample is None:
            raise InputError(f"step {self.records[k].step} drew no token")
        return sample

    def logit_lens(self, k: int) -> Any:
        return self.session.logit_lens(k)

    def _layer(self, layer: Any) -> int:
        return _index(layer, "layer", self.session.config.num_hidden_layers)

    def _head(self, head: Any) -> int:
        return _index(head, "head", self.session.config.num_attention_heads)


def _index(value: Any, name: str, count: int) -> int:
    i = int(value or 0)
    if not 0 <= i < count:
        raise InputError(f"{name} must be a whole number from 0 to {count - 1}, got {i}")
    return i


def drawn_view(view: View) -> type[ViewPanel]:
    """A panel class for `view`: a plot slot for its figure, an HTML slot for its HTML, under its caption."""
    slots = ((Slot(f"{view.key}_fig", f"{view.key}-figure", plot=True),) if view.figure else ()) + \
            ((Slot(f"{view.key}_html", f"{view.key}-html"),) if view.html else ())

    class DrawnView(ViewPanel):
        def layout(self) -> None:
            self.caption_md()
            for s in self.slots:
                self.slot(s.key)

        def blank(self) -> dict[str, Any]:
            return {s.key: empty_figure(HINT) if s.plot else "" for s in self.slots}

        def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
            run = PageRun(visitor.session)
            at = Picked(run, len(run.records) - 1, visitor.selected_position(), visitor.selected is not None)
            views = {}
            if view.figure:
                views[f"{view.key}_fig"] = view.figure(at, layer, head)
            if view.html:
                views[f"{view.key}_html"] = view.html(at)
            return views

    DrawnView.__name__ = DrawnView.__qualname__ = f"DrawnView_{view.key}"
    DrawnView.key, DrawnView.title, DrawnView.tab_id = view.key, view.title, view.tab_id
    DrawnView.caption, DrawnView.slots = view.tour or view.title, slots
    return DrawnView
