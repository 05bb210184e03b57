"""The named API endpoints `prefill` and `step`, driven with gradio_client over the app every browser test of
this process opens (`app_url`: the real default model, served in this process)."""

from __future__ import annotations

import pytest

from harness.net import api_client


def test_prefill_then_step_over_the_api(app_url):
    client = api_client(app_url)
    out = client.predict("The quick brown fox", False, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
    assert out["phase"] == "prefill done" and len(out["generated_ids"]) == 1
    assert len(out["pieces"]) == len(out["prompt_ids"]) + 1 and out["ttft_ms"] > 0
    for k in (1, 2):
        out = client.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
        assert len(out["generated_ids"]) == k + 1
    assert out["phase"].startswith("decode step 2")
    other = api_client(app_url)  # another client is another session
    with pytest.raises(Exception, match="Prefill first"):
        other.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
    with pytest.raises(Exception, match="prompt is empty"):
        other.predict("", False, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
