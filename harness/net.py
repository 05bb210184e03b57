"""Loopback plumbing for everything that starts a server: a free port, and waiting until a URL answers.

Used by harness/server_proc.py and harness/app_server.py, by the tests (the Space tests) and by bench/ui.py,
which import it as `harness.net` (they run from the repository root, so the root is on sys.path). No pytest
here: callers turn `NotServing` into their own failure, with their server's log.

- `free_port()`: a TCP port on 127.0.0.1 that nothing listens on (the OS picks it; closed again before
  it is returned, so a server can bind it, and a client that connects to it is refused).
- `wait_until(done, timeout_s)`: call `done()` every `interval_s` until it is true or time runs out.
- `wait_for_http(url, proc)`: until GET `url` answers 200; `NotServing` if `proc` exits first or it
  never does.
- `tls_verify(url)`: httpx's `verify` for a server's address (no SSL context built for plain http), and
  `api_client(url)`: a quiet gradio_client Client of the app there, built with it; `stream_closed(client)`:
  wait until that client has read the end of its stream of answers (before submitting the next event).
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from typing import Callable

HOST = "127.0.0.1"


class NotServing(RuntimeError):
    """The server exited, or did not answer in time; the message says which."""


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(done: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """True as soon as `done()` is, False if it is still false after `timeout_s` (asked at least once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def answers(url: str, timeout_s: float = 5.0) -> bool:
    """Whether GET `url` answers 200 now (refused, reset, an error status or a slow reply: False)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except OSError:  # URLError and HTTPError are OSErrors, as are refused connections and timeouts
        return False


def wait_for_http(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 240.0,
                  interval_s: float = 0.5) -> None:
    """Return once GET `url` answers 200. NotServing if `proc` (the server) exits first, or after `timeout_s`."""

    def up() -> bool:
        if proc is not None and proc.poll() is not None:
            raise NotServing(f"the server exited with {proc.returncode} before {url} answered")
        return answers(url)

    if not wait_until(up, timeout_s, interval_s):
        raise NotServing(f"{url} did not answer within {timeout_s:.0f} s")


def tls_verify(url: str) -> bool:
    """httpx's `verify` for requests to `url`: False over plain http, where no TLS is spoken, so that httpx builds
    no SSL context it would never use (it loads certifi's CA bundle: about 20 ms of CPU each time, and gradio_client
    makes a new httpx client for each request, stream and heartbeat); True, the certificate checked, over https."""
    return not url.startswith("http://")


def api_client(url: str, **kwargs):
    """A gradio_client Client of the app at `url`, quiet (`verbose=False`), with `tls_verify(url)`; `kwargs` go to
    the Client."""
    from gradio_client import Client

    return Client(url, verbose=False, ssl_verify=tls_verify(url), **kwargs)


def stream_closed(client, timeout_s: float = 2.0) -> bool:
    """Wait until `client` (a gradio_client Client) has read the end of its stream of answers, when none of its
    events is pending; True once it has (or has an event pending, or keeps no such state), False after
    `timeout_s`.

    A client reads every event's answers from one stream, which the server ends (`close_stream`) once no event
    of the client is pending. An event submitted after the server sent that end and before the client read it
    joins the ending stream: the client opens no new one, and when its reader ends it cancels the event
    (CancelledError; gradio_client 2.7, the race static/queue_stream.js closes for the page). A caller that
    submits one event after another waits here between them, so that each joins a stream of its own."""
    lock = getattr(client, "pending_lock", None)
    if lock is None or not hasattr(client, "stream_open"):
        return True

    def settled() -> bool:
        with lock:
            return not client.stream_open or bool(client.pending_event_ids)

    return wait_until(settled, timeout_s, interval_s=0.005)
