"""Fixture for the browser tests: the app over the real default model, served in-process on a free port.

Import it explicitly: `from tests.ui_server import app_url  # noqa: F401`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.net import HOST, free_port

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
# The guided tour opens on a browser's first visit (static/tour.js). Pages that test other parts mark it seen
# (`page.add_init_script(TOUR_SEEN_JS)`), as a returning visitor, so its card never covers what they click.
TOUR_SEEN_JS = "try { localStorage.setItem('inspector-tour-seen', '1'); } catch (e) {}"


def start_app(loaded):
    """Build and launch the app on 127.0.0.1:<free port>; returns the Blocks (`.local_url`, `.store`)."""
    from inspector.ui.app import build_app, launch_kwargs

    demo = build_app(loaded)
    demo.queue(default_concurrency_limit=None)
    demo.launch(server_name=HOST, server_port=free_port(), prevent_thread_lock=True, quiet=True,
                run_history=False, **launch_kwargs())
    return demo


@pytest.fixture(scope="module")
def app_demo(default_model):
    demo = start_app(default_model)
    yield demo
    demo.close()


@pytest.fixture(scope="module")
def app_url(app_demo) -> str:
    ARTIFACTS.mkdir(exist_ok=True)
    return app_demo.local_url
