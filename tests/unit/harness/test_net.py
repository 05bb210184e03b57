"""harness.net: a free port can be bound and refuses connections; waiting ends when the URL answers, when the
server exits, or at the timeout."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time

import pytest

from harness.net import NotServing, answers, free_port, wait_for_http, wait_until


class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_free_port_is_bindable_and_refuses_connections():
    port = free_port()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_answers_only_a_200(server):
    assert answers(server + "/")
    assert not answers(server + "/missing")  # 404
    assert not answers(f"http://127.0.0.1:{free_port()}/")  # refused


def test_wait_for_http_returns_once_the_url_answers(server):
    t0 = time.monotonic()
    wait_for_http(server + "/", timeout_s=5)
    assert time.monotonic() - t0 < 2


def test_wait_for_http_stops_when_the_server_exits():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait(30)
    with pytest.raises(NotServing, match="exited with 3"):
        wait_for_http(f"http://127.0.0.1:{free_port()}/", proc, timeout_s=30)


def test_wait_for_http_gives_up_at_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(NotServing, match="did not answer within 1 s"):
        wait_for_http(f"http://127.0.0.1:{free_port()}/", timeout_s=1.0, interval_s=0.2)
    assert 1.0 <= time.monotonic() - t0 < 3


def test_wait_until_asks_once_even_past_the_deadline():
    calls = []
    assert not wait_until(lambda: calls.append(1) and False, timeout_s=-1)
    assert calls == [1]
    flips = iter([False, False, True])
    assert wait_until(lambda: next(flips), timeout_s=5, interval_s=0.01)


def test_tls_verify_checks_certificates_only_where_tls_is_spoken():
    from harness.net import tls_verify

    assert tls_verify("http://127.0.0.1:7860/") is False  # plain http: no SSL context to build
    assert tls_verify("https://user-space.hf.space/") is True


def test_stream_closed_lets_each_sequential_event_open_a_stream_of_its_own():
    """After each event, `stream_closed` waits until the client has read the end of its stream of answers, so the
    next event opens a new one (the client's stream count goes up by one per event) instead of joining one that
    is ending."""
    import gradio as gr

    from harness.app_server import launch_here
    from harness.net import api_client, stream_closed

    with gr.Blocks() as demo:
        out = gr.Textbox()
        gr.Button("Go").click(lambda: "done", None, out, api_name="go")
    launch_here(demo)
    try:
        client = api_client(demo.local_url)
        streams = client.stream_epoch
        for i in range(3):
            assert client.predict(api_name="/go") == "done"
            assert stream_closed(client, timeout_s=10)
            assert not client.stream_open
            assert client.stream_epoch == streams + i + 1
        client.close()
    finally:
        demo.close()
