"""A `TabContext` for testing a lab tab's handlers without a page: the model, a session store and caps;
the page components it would hold are None (handlers take their values as arguments)."""

from __future__ import annotations

import html

from inspector.ui.app_model import AppLimits
from inspector.ui.sessions import SessionStore, new_ui_session
from inspector.ui.tab_context import TabContext


def make_ctx(loaded, **limits) -> TabContext:
    lim = AppLimits(**limits)
    store = SessionStore(lambda: new_ui_session(loaded), lim)
    return TabContext(loaded, store, lim, None, None, None, None, (None,) * 5, None)


def status(out) -> str:
    """A lab handler's status line (its first output), unescaped."""
    return html.unescape(out[0])
