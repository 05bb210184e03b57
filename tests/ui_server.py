"""What the browser tests share beside the app: where their screenshots go, and the page script that marks
the guided tour seen. The app itself is one per test session, over the real default model: the `app_demo`
and `app_url` fixtures of tests/conftest.py; every test opens it in a fresh page (a new browser session)."""

from __future__ import annotations

from pathlib import Path

from harness.app_server import TOUR_SEEN_JS, start_app  # noqa: F401  (TOUR_SEEN_JS: read from here too)

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
