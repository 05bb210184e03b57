"""Fixture for the browser tests: the app over the real default model, served in-process on a free port.

Import it explicitly: `from tests.ui_server import app_url  # noqa: F401`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.app_server import TOUR_SEEN_JS, start_app  # noqa: F401  (TOUR_SEEN_JS: read from here too)

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


@pytest.fixture(scope="module")
def app_demo(default_model):
    demo = start_app(default_model)
    yield demo
    demo.close()


@pytest.fixture(scope="module")
def app_url(app_demo) -> str:
    ARTIFACTS.mkdir(exist_ok=True)
    return app_demo.local_url
