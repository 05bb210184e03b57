"""The named API endpoints `prefill` and `step`, driven with gradio_client over a tiny model."""

from __future__ import annotations

import pytest

from tests.support.ui_server import start_app
from tests.support.viz_records import tiny_loaded  # noqa: F401


@pytest.fixture(scope="module")
def tiny_url(tiny_loaded):
    demo = start_app(tiny_loaded)
    yield demo.local_url
    demo.close()


def test_prefill_then_step_over_the_api(tiny_url):
    from gradio_client import Client

    client = Client(tiny_url, verbose=False)
    out = client.predict("The quick brown fox", False, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
    assert out["phase"] == "prefill done" and len(out["generated_ids"]) == 1
    assert len(out["pieces"]) == len(out["prompt_ids"]) + 1 and out["ttft_ms"] > 0
    for k in (1, 2):
        out = client.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
        assert len(out["generated_ids"]) == k + 1
    assert out["phase"].startswith("decode step 2")
    other = Client(tiny_url, verbose=False)  # another client is another session
    with pytest.raises(Exception, match="Prefill first"):
        other.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
    with pytest.raises(Exception, match="prompt is empty"):
        other.predict("", False, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
