"""Fixtures the browser files share beyond tests/conftest.py's app over the default model (`app_url`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.ui_server import Server


@pytest.fixture(scope="session")
def number_box_server() -> Iterator[Server]:
    """One `python app.py` for test_ui_number_boxes.py and test_ui_number_boxes_labs.py, whose tests read its log
    (where Gradio prints a failed event's traceback): one worker runs both files (tests/conftest.py's
    SAME_WORKER), so it starts once."""
    with Server(env={"PYTHONUNBUFFERED": "1"}) as s:
        yield s
