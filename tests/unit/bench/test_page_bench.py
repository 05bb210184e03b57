"""`bench.page.cpu_seconds`, which says where the cores go during Play: a busy model thread counts in this process
and in its model threads, a busy child process in the processes started from here, not in the browser."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from bench.page import cpu_seconds
from inspector.ui.model_thread import THREAD_NAME

OTHER = "other processes started from here (Playwright's driver)"
MODEL = "of it the model threads"


def test_a_busy_model_thread_and_a_busy_child_are_counted_where_they_run():
    worked, done = threading.Event(), threading.Event()

    def model_thread() -> None:  # busy for 0.5 s of its own CPU, then alive (idle) until read
        end = time.thread_time() + 0.5
        while time.thread_time() < end:
            pass
        worked.set()
        done.wait(30)

    before = cpu_seconds()
    thread = threading.Thread(target=model_thread, name=f"{THREAD_NAME}-decode_test")
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        thread.start()
        assert worked.wait(30)
        deadline = time.monotonic() + 30
        while cpu_seconds()[OTHER] - before[OTHER] < 0.45 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = cpu_seconds()
    finally:
        done.set()
        thread.join()
        child.kill()
        child.wait()
    gained = {key: after[key] - before[key] for key in before}
    assert gained[MODEL] >= 0.45 and gained["this process"] >= gained[MODEL]
    assert 0.45 <= gained[OTHER] < 2.0  # the child's 0.5 s, and its start
    assert gained["browser (Chromium)"] == 0.0
