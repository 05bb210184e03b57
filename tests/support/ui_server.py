"""The apps the tests serve, each start counted, and where the browser tests' screenshots go.

- `start_app(loaded)`: the app served in this process (harness.app_server's), counted. The browser tests' app
  is over the real default model, one in each test process that runs a unit of the files using it (two per run):
  the `app_demo` and `app_url` fixtures of tests/conftest.py; every test opens it in a fresh page (a new browser
  session).
- `serve_tiny_moe(directory)`: the app over a tiny random mixture of experts with the caps `TINY_APP_CAPS`,
  one per test process (the `tiny_moe_app` fixture of tests/conftest.py): the Routing tab's browser test and
  the API fuzz's cases on a tiny model share it (one worker runs both files: SAME_WORKER in tests/conftest.py).
- `caps_in_place(demo, caps)`: a served app with other caps while a block runs (the API fuzz's cases on the
  default app: tests/support/api_fuzz.py), where an app built with them would be one more served app.
- `Server`: the app as a `python app.py` subprocess (harness.server_proc's), counted when it starts.
- `count_served(what)`: counts an app a test serves another way.
- `TOUR_SEEN_JS`: the page script that marks the guided tour seen.
- `thread_stacks()`: every thread of this process with its stack, and `queue_state()`: Gradio's queue of the apps
  served here, per browser session, both for a failed browser test's report.

A start appends one line to the file that INSPECTOR_TEST_SERVED_LOG names (tests/conftest.py sets it for a
run, shared by its xdist workers, and prints the count at the end: "served apps this run: N"); with the
variable unset nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import app_server, server_proc
from harness.app_server import TOUR_SEEN_JS  # noqa: F401  (read from here)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SERVED_LOG_VAR = "INSPECTOR_TEST_SERVED_LOG"


def thread_stacks() -> str:
    """Every thread of this process (where the browser tests' default app is served) with its stack, busy ones
    first: attached to a failed browser test's report (tests/conftest.py), it shows which handler, if any, was
    still running or waiting when the page waited in vain for an answer. An idle thread is one line."""
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    idle_ends = ("wait", "_worker", "get", "select", "_wait_for_tstate_lock", "run_forever", "accept", "poll")
    busy, idle = [], []
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame)
        title = f"thread {names.get(ident, ident)}"
        inside_project = any("/inspector/" in f.filename or "/tests/" in f.filename for f in stack)
        if stack and stack[-1].name in idle_ends and not inside_project:
            idle.append(f"{title}: idle in {stack[-1].name} ({Path(stack[-1].filename).name})")
        else:
            busy.append(title + ":\n" + "".join(traceback.format_list(stack[-12:])))
    return "\n".join(busy + idle)


_SERVED: list[Any] = []  # the apps `start_app` served in this process, for `queue_state`


def queue_state() -> str:
    """Each app served in this process: Gradio's queue as it stands, per browser session (session hash): the
    events joined and not yet completed (their functions) and the messages waiting for a stream to carry them
    to the page; then each event queue's waiting events. Attached to a failed browser test's report
    (tests/conftest.py) beside the thread stacks, it tells a page whose request never reached the server (no
    event of its session) from an answer that was made but never sent (messages waiting: no stream open for
    them), from an event still queued. A read of the queue's fields from another thread: a snapshot for a
    report, not for control."""
    lines = []
    for demo in _SERVED:
        queue = getattr(demo, "_queue", None)
        if queue is None:
            continue
        lines.append(f"app {getattr(demo, 'local_url', '?')}:")
        try:
            events = queue.event_ids_to_events
            sessions = set(queue.pending_event_ids_session) | set(queue.pending_messages_per_session.keys())
            for session in sorted(sessions):
                ids = list(queue.pending_event_ids_session.get(session, ()))
                fns = [getattr(getattr(events.get(i), "fn", None), "name", "?") for i in ids]
                waiting = queue.pending_messages_per_session.get(session)
                kinds = [getattr(m, "msg", type(m).__name__) for m in list(getattr(waiting, "_queue", ()))]
                if ids or kinds:
                    lines.append(f"  session {session}: pending events {fns or 'none'}; messages not yet sent "
                                 f"{kinds or 'none'}")
            for cid, eq in list(queue.event_queue_per_concurrency_id.items()):
                if eq.queue or eq.current_concurrency:
                    lines.append(f"  event queue {cid}: {len(eq.queue)} waiting, {eq.current_concurrency} running")
        except Exception as e:  # noqa: BLE001 (a report must not fail on a field read mid-change)
            lines.append(f"  (could not read the queue: {e!r})")
    return "\n".join(lines) or "no app served by start_app in this process"


def count_served(what: str) -> None:
    """One line for one served app: the test process, the test that started it, what it serves."""
    path = os.environ.get(SERVED_LOG_VAR)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ", 1)[0]
    with open(path, "a", encoding="utf-8") as log:  # one short write per line: the workers' lines do not mix
        log.write(f"pid {os.getpid()} | {test} | {what}\n")


def caps_in_env() -> str:
    caps = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("INSPECTOR_MAX_"))
    return ", ".join(caps) or "default caps"


def start_app(loaded):
    """harness.app_server.start_app, counted."""
    demo = app_server.start_app(loaded)
    _SERVED.append(demo)
    count_served(f"in process: {loaded.name} ({caps_in_env()})")
    return demo


class Server(server_proc.Server):
    """harness.server_proc.Server, counted when it starts (as `served_as`, default "python app.py")."""

    def __init__(self, *args: Any, served_as: str = "python app.py", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.served_as = served_as

    def start(self) -> "Server":
        super().start()
        count_served(f"{self.served_as}, pid {self.pid}")
        return self


# The tiny app's caps: a prompt cap above the tiny models' context window of 256 tokens (so the window is what
# refuses a long prompt), 8 new tokens (so "just over" the cap is cheap), room for the fuzz's clients.
TINY_APP_CAPS = {"INSPECTOR_MAX_PROMPT_TOKENS": "1024", "INSPECTOR_MAX_STEPS": "8", "INSPECTOR_MAX_SESSIONS": "64"}


def limits_from(caps: dict[str, str]):
    """The `AppLimits` an app built with the INSPECTOR_MAX_* variables of `caps` set has (`app_limits()` reads
    them, as `build_app` does; a cap not in `caps` is this process's, as for an app built here)."""
    from inspector.ui.app_model import app_limits

    with pytest.MonkeyPatch.context() as mp:
        for k, v in caps.items():
            mp.setenv(k, v)
        return app_limits()


def start_app_with_caps(loaded, caps: dict[str, str]):
    """`start_app` with the INSPECTOR_MAX_* variables of `caps` set while the app is built (it reads them then)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in caps.items():
            mp.setenv(k, v)
        return start_app(loaded)


@contextmanager
def caps_in_place(demo, caps: dict[str, str]) -> Iterator[None]:
    """The served app `demo` with the caps an app built with `caps` has (`limits_from`) while the block runs,
    then its own again. Its handlers read the caps when they run (`demo.store.limits`), so it answers as an app
    built with those caps would, except for what `build_app` fixes (the Serving lab's caption, the sessions'
    time-to-live). Nothing else may use the app meanwhile: a test process runs one test at a time."""
    own = demo.store.limits
    demo.store.limits = limits_from(caps)
    try:
        yield
    finally:
        demo.store.limits = own


@dataclass
class ServedApp:
    """An app served in this process: its Blocks (`.store`: the live sessions) and the model it serves."""

    demo: Any
    loaded: Any

    @property
    def local_url(self) -> str:
        return self.demo.local_url


def serve_tiny_moe(directory: Path) -> ServedApp:
    """The app over a tiny random mixture of experts (tests/support/tiny.py's `make_tiny_moe`) with
    `TINY_APP_CAPS`: what the `tiny_moe_app` fixture of tests/conftest.py serves."""
    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_moe

    loaded = load_model(str(make_tiny_moe(directory)))
    return ServedApp(start_app_with_caps(loaded, TINY_APP_CAPS), loaded)
