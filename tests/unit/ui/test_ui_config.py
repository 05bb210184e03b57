"""The page config Gradio deep-copies on every GET /config must not reach the sessions or the model."""

from __future__ import annotations

import copy

import pytest

from inspector.engine.config import SamplingParams
from inspector.ui.app import build_app
from tests.support.viz_records import tiny_loaded  # noqa: F401


def test_copying_the_page_config_copies_no_session_and_no_weights(tiny_loaded, monkeypatch):
    """Each page load and each gradio_client deep-copies `demo.config`; anything it references is copied
    with it. A bound method of the visitor store there copied every live session and the model (seconds
    and gigabytes per visitor)."""
    from inspector.session.session import Session
    from inspector.ui.visitors import Visitors

    demo = build_app(tiny_loaded)
    sid, visitor = demo.store.get_or_create(None)
    visitor.session.prefill("The quick brown fox", SamplingParams(), max_new_tokens=2)
    assert len(demo.store) == 1

    def refuse(self, memo):
        raise AssertionError(f"{type(self).__name__} reached from the page config")

    for cls in (Session, Visitors, type(tiny_loaded)):
        monkeypatch.setattr(cls, "__deepcopy__", refuse, raising=False)
    copy.deepcopy(demo.config)  # what Gradio does for GET /config
    demo.close()


@pytest.mark.parametrize("n", [0, 2])
def test_the_state_delete_callback_still_frees_the_session(tiny_loaded, n):
    demo = build_app(tiny_loaded)
    ids = [demo.store.get_or_create(None)[0] for _ in range(n)]
    state = next(b for b in demo.blocks.values() if type(b).__name__ == "State")
    for sid in ids:
        state.delete_callback(sid)
    assert len(demo.store) == 0
    demo.close()
