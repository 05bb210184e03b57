"""`queue_app`: the app's Gradio queue rebuilds its monitoring summary (a pandas DataFrame of every event it has
recorded) once every MONITORING_SUMMARY_EVERY events, not after each event; GRADIO_ANALYTICS_CACHE_FREQUENCY set in
the environment wins. Checked on a one-button page served in this process, the events sent through the queue. The
idle queue polls every IDLE_POLL_S (Gradio's attribute for it still there) and still answers."""

from __future__ import annotations

import gradio as gr
import pytest
from gradio.queueing import Queue

from harness.app_server import launch_here
from harness.net import api_client
from inspector.ui.app import IDLE_POLL_S, MONITORING_SUMMARY_EVERY, queue_app

EVENTS = 4


def summaries_rebuilt(monkeypatch, frequency: str | None) -> int:
    """How many times the summary was rebuilt over EVENTS events of a page put on the queue by `queue_app`, with
    GRADIO_ANALYTICS_CACHE_FREQUENCY unset (None) or set to `frequency`."""
    monkeypatch.setenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", frequency or "")
    if frequency is None:
        monkeypatch.delenv("GRADIO_ANALYTICS_CACHE_FREQUENCY")  # put back as it was after the test
    rebuilt = []
    real = Queue._get_df  # the summary's DataFrame, built each time it is rebuilt
    monkeypatch.setattr(Queue, "_get_df", staticmethod(lambda records: rebuilt.append(len(records)) or real(records)))
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(lambda text: text + "!", box, box, api_name="shout")
    queue_app(demo)
    launch_here(demo)
    assert demo._queue.sleep_when_free == IDLE_POLL_S  # Gradio still polls an idle queue by this attribute
    try:
        client = api_client(demo.local_url)
        for i in range(EVENTS):
            assert client.predict(str(i), api_name="/shout") == f"{i}!"
    finally:
        demo.close()
    return len(rebuilt)


def test_the_summary_is_not_rebuilt_after_each_event(monkeypatch):
    assert MONITORING_SUMMARY_EVERY > EVENTS
    assert summaries_rebuilt(monkeypatch, None) == 0


@pytest.mark.parametrize("frequency", ["1", "2"])
def test_a_frequency_set_in_the_environment_wins(monkeypatch, frequency):
    """Gradio's own default (1) rebuilds it after every event: what the first test would see without queue_app."""
    assert summaries_rebuilt(monkeypatch, frequency) == EVENTS // int(frequency)
