"""`model_thread.submit(after_s=...)`: queued work held back starts after the hold, or at once when a call that
is waited for (a Step) queues behind it; work keeps its order on the decode thread either way."""

from __future__ import annotations

import time

from inspector.ui import model_thread


def test_held_work_starts_after_its_hold_when_nothing_waits_behind_it():
    model_thread.run(lambda: None)  # the decode thread is up and idle
    t0 = time.monotonic()
    started = model_thread.submit(time.monotonic, after_s=0.3).result(timeout=10)
    assert started - t0 >= 0.29


def test_a_waited_for_call_behind_held_work_starts_it_at_once_and_runs_after_it():
    model_thread.run(lambda: None)
    order = []
    t0 = time.monotonic()
    held = model_thread.submit(lambda: order.append(("held", time.monotonic())), after_s=30.0)
    model_thread.run(lambda: order.append(("step", time.monotonic())))  # returns long before 30 s
    assert held.done()
    assert [name for name, _ in order] == ["held", "step"]
    assert order[-1][1] - t0 < 10.0
    model_thread.submit(lambda: None).result(timeout=10)  # no hold: runs as soon as the thread is free
