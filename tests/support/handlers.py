"""The handler tests' pieces (pages without a browser, over a tiny model): `make(loaded, **limits)` builds bare
handlers and their visitor store, `status(out)` reads a handler's status line, `SAMPLING` is greedy sampling
as the page's five boxes send it, `other_token` a candidate the run did not take (to branch on), and the
`no_run_ahead` fixture (autouse where imported) turns off forwards run ahead."""

from __future__ import annotations

import pytest

from inspector.session.session import Session
from inspector.ui.app_model import AppLimits
from inspector.ui.handlers import Handlers
from inspector.ui.visitors import Visitors, new_ui_session


SAMPLING = (0.0, 0, 1.0, 0.0, 0)  # temperature, top-k, top-p, min-p, seed


def make(loaded, **limits):
    lim = AppLimits(**limits)
    store = Visitors(lambda: new_ui_session(loaded), lim)
    return Handlers.bare(loaded, store), store


def status(out) -> str:
    """The status line of a handler's views (a prefill's (session id, views): its views)."""
    views = out[-1] if isinstance(out, (tuple, list)) else out
    return views["status"]


@pytest.fixture(autouse=True)
def no_run_ahead(monkeypatch):
    """Forwards run ahead would make the two sessions' memory (in the status line) differ by one forward."""
    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "0")


def other_token(s: Session, step: int) -> int:
    return next(c.id for c in s.records[step].sample.candidates if c.id != s.generated_ids[step])
