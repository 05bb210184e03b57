"""Play's pace: the "Speed" control (tokens per second, 1 to 20, or as fast as the model goes) and the wait
between two steps.

`build_speed_controls()` lays out the number box and its "max" tick; `step_interval(speed, fastest)` parses them
(`PLAY_SPEED`, refused by name like every number, never clamped) into the seconds one step should take, None
for as fast as possible. `wait_for_pace(pause, started, interval)` waits out the rest of that interval on the
session's pause event: Pause ends the wait at once, and no lock is held while waiting (Play holds only its
session's entry; the model thread is free between steps).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import gradio as gr

from inspector.ui.fields import FreeNumber
from inspector.validate import Bound

PLAY_SPEED = Bound("speed (tokens/s)", False, 1, 20)
DEFAULT_SPEED = 3  # slow enough to watch each token arrive


def build_speed_controls() -> tuple[FreeNumber, gr.Checkbox]:
    """The "Speed" box (tokens/s, 1 to 20; a number box: it fits the run controls' row) and its "max" tick."""
    speed = FreeNumber(DEFAULT_SPEED, label="Speed (tok/s)", elem_id="play-speed", min_width=90)
    fastest = gr.Checkbox(False, label="max", elem_id="play-max", min_width=60)
    return speed, fastest


def step_interval(speed: Any, fastest: Any = False) -> float | None:
    """Seconds per Play step for the controls' values; None = no wait ("max" ticked: the slider is unused)."""
    if fastest:
        return None
    return 1.0 / float(PLAY_SPEED.parse(speed))


def wait_for_pace(pause: threading.Event, started: float, interval: float | None) -> None:
    """Wait until `started + interval` (monotonic) or until `pause` is set, whichever comes first."""
    if interval is None:
        return
    left = started + interval - time.monotonic()
    if left > 0:
        pause.wait(left)
