"""A page without a browser, for testing panels' handlers: the model, a visitor store and caps, every panel
of the registry and the page's run; the page's components are None (handlers take their values as arguments).

`make_page(loaded, **limits)` -> `Page`; `page.panels[key]` is a panel (`page.panels["speculative"].start(...)`),
`page.handlers` the run's handlers. A handler returns {output name: value}; `status(out)` is its status line.
"""

from __future__ import annotations

import html

from inspector.ui.app_model import AppLimits
from inspector.ui.handlers import Handlers
from inspector.ui.panel import Page
from inspector.ui.visitors import Visitors, new_ui_session


def make_page(loaded, store: Visitors | None = None, **limits) -> Page:
    lim = AppLimits(**limits) if store is None else store.limits
    store = store or Visitors(lambda: new_ui_session(loaded), lim)
    return Handlers.bare(loaded, store).page


def make_ctx(loaded, **limits) -> Page:
    """`make_page` with limits only (the page's store, caps and panels: `ctx.store`, `ctx.panels[key]`)."""
    return make_page(loaded, **limits)


def panel(loaded, key: str, store: Visitors | None = None, **limits):
    """One panel of a fresh bare page (`make_page`)."""
    return make_page(loaded, store, **limits).panels[key]


def status(out) -> str:
    """A handler's status line, unescaped."""
    return html.unescape(out["status"])
