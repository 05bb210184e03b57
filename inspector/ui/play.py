"""Play: the one loop and the one pause for everything the page plays — the run's decode steps, the
Speculative lab's rounds, the Serving lab's scheduler steps.

`play_steps(visitor, advance, pace)` holds the browser session's visitor for "play" (one model call at a time
per session: a Step or a lab's button pressed meanwhile is refused by name), then calls `advance()` (one
step; True while there is more) until it says the end, raises an `InspectorError` (which ends Play with its
message) or Pause sets `visitor.pause`, and yields an `Update` after every step: whether to send the page an
update now and whether with the open view's plots. It waits out `pace` between steps on the pause event, so
Pause ends the wait at once and no lock but the visitor's is held while waiting; the visitor is released however
Play ends (the end, a refusal, Pause, the browser gone). Every Pause button of the page sets the same event.

At max speed the steps also go on while an update is sent (`unhindered`): Play's steps run on a thread of their
own and hand each update over; Gradio sends them as fast as it can, and an update made while the last one is
still on its way goes with the next. So encoding and sending an update, and a local browser drawing it, never
hold up the next step on the model thread.

Pace (`PlayPace`): the "Speed" control (tokens per second, 1 to 20, or as fast as the model goes) sets
the seconds one step should take; at max speed the page gets an update at most every `MAX_SPEED_UPDATE_S`
(each then shows every step since the last); the open view's plots are redrawn at most every
`PLOT_INTERVAL_S` (at max speed `MAX_SPEED_PLOT_INTERVAL_S`) and always on the last step, so a browser that
paints slower than the model steps never falls behind and steals the CPU from the model. At max speed the
plots are also spaced so that building and sending them takes at most `PLOT_SHARE` of Play's time: the views
are built on the model thread, between two steps, so each redraw of the plots delays the next token by its
cost (the last update with plots: how much longer it took than the last one without). Where the open view's
plots take 30 ms that changes nothing; where they take 250 ms (the Residual tab's, measured at a load average
of 16 on 2 cores) they are redrawn every 2.5 s, not every 0.4 s, which would have taken about 60% of Play's
time. What the server measures is not all a redraw costs: a browser on the same machine then redraws the plots
(`Plotly.react`) and the view's HTML on the cores the model steps on, which takes it many times what building
them took the server (bench/ui.py measures both per Play token). Hence the longer interval at max speed, where
the model keeps a core busy; a set speed leaves the cores time between steps. `EVERY_STEP`: an update with plots after every
step, no wait (the labs' Play).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.ui.fields import PLAY_SPEED, FreeNumber
from inspector.ui.visitors import Visitor, Visitors

DEFAULT_SPEED = 3  # slow enough to watch each token arrive
PLOT_INTERVAL_S = 0.4  # the open view's plots at most 2.5 times a second
MAX_SPEED_PLOT_INTERVAL_S = 1.0  # at the Speed control's max, the open view's plots at most once a second
MAX_SPEED_UPDATE_S = 0.2  # at the Speed control's max, the page gets at most 5 updates a second
PLOT_SHARE = 0.1  # at the Speed control's max, the plots' redraws take at most this share of Play's time
PREFILL_WAIT_S = 300.0  # Play pressed during a prefill waits this long for it to finish
PREFILL_START_WAIT_S = 1.0  # Play pressed together with Prefill waits this long for the prefill to start


@dataclass(frozen=True)
class PlayPace:
    """Seconds per step (None: as fast as the model goes), and how often the page gets updates and plots."""

    interval: float | None
    plot_interval_s: float = PLOT_INTERVAL_S
    max_speed_update_s: float = MAX_SPEED_UPDATE_S
    max_speed_plot_interval_s: float = MAX_SPEED_PLOT_INTERVAL_S

    @classmethod
    def of(cls, speed: Any, fastest: Any = False) -> "PlayPace":
        """The Speed control's values (refused by name, never clamped)."""
        return cls(step_interval(speed, fastest))


EVERY_STEP = PlayPace(0.0, plot_interval_s=0.0, max_speed_update_s=0.0, max_speed_plot_interval_s=0.0)


@dataclass(frozen=True)
class Update:
    """After one of Play's steps: send the page an update now (`send`), with the open view's plots (`plots`)."""

    send: bool
    plots: bool
    last: bool = False


def build_speed_controls() -> tuple[FreeNumber, Any]:
    """The "Speed" box (tokens/s, 1 to 20; a number box: it fits the run controls' row) and its "max" tick."""
    import gradio as gr

    speed = FreeNumber(DEFAULT_SPEED, label="Speed (tok/s)", elem_id="play-speed", min_width=90)
    fastest = gr.Checkbox(False, label="max", elem_id="play-max", min_width=60)
    return speed, fastest


def step_interval(speed: Any, fastest: Any = False) -> float | None:
    """Seconds per Play step for the controls' values; None = no wait ("max" ticked: the box is unused)."""
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


def visitor_when_prefilled(store: Visitors, sid: Any) -> Visitor:
    """The session to play: one with a run, or one whose prefill is running (Play then waits for it). Play
    pressed together with Prefill may arrive first: wait briefly for that prefill to start."""
    deadline = time.monotonic() + PREFILL_START_WAIT_S
    while True:
        visitor = store.get(sid)
        if visitor is not None and (visitor.activity == "prefill" or (visitor.session is not None and visitor.session.records)):
            if visitor.activity != "prefill" and visitor.session.finished:
                raise InputError(f"generation finished ({visitor.session.finished}): press Prefill to start again")
            return visitor
        if time.monotonic() >= deadline:
            return store.run_visitor(sid)  # raises why there is nothing to play
        time.sleep(0.05)


def unhindered(updates: Callable[[], Iterator[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Run the iterator `updates()` on a thread of its own and yield what it yields, without ever holding it up:
    an update made while the caller still handles the last one is merged into the next (`{**older, **newer}`:
    each update holds whole views, so the newer ones win and nothing shown is lost). Its exception is raised
    here once its updates are out. Closed early (the page gone), it closes `updates()` at its next update, as
    closing it directly would (Play's visitor is released there)."""
    ready = threading.Condition()
    pending: list[dict[str, Any]] = []  # at most one: every update made since the caller took the last
    state: dict[str, Any] = {"done": False, "error": None}
    closed = threading.Event()

    def run() -> None:
        made = updates()
        try:
            for update in made:
                with ready:
                    pending[:] = [{**pending[0], **update}] if pending else [update]
                    ready.notify()
                if closed.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 -- raised again on the caller's thread
            state["error"] = exc
        finally:
            made.close()
            with ready:
                state["done"] = True
                ready.notify()

    thread = threading.Thread(target=run, name="inspector-play", daemon=True)
    thread.start()
    try:
        while True:
            with ready:
                ready.wait_for(lambda: pending or state["done"])
                update = pending.pop() if pending else None
            if update is None:
                break
            yield update
    finally:
        closed.set()
    thread.join()
    if state["error"] is not None:
        raise state["error"]


def play_steps(visitor: Visitor, advance: Callable[[], bool], pace: PlayPace = EVERY_STEP, *,
               check: Callable[[], Any] | None = None, activity: str = "play", hold: bool = True) -> Iterator[Update]:
    """Step with `advance()` until the end, a refusal or Pause, yielding an `Update` after each step (see the
    module docstring). A prefill running for the visitor is waited for (`PREFILL_WAIT_S`); `check()` runs once
    the visitor is held (e.g. the prefill waited for may have failed). `hold=False`: the visitor is held for each
    step only, so another request of the session (the Serving lab's Load, which replaces what plays) can come
    between two steps."""
    if hold:
        visitor.acquire(activity, wait_s=PREFILL_WAIT_S if visitor.activity == "prefill" else 0.0)
    visitor.pause.clear()
    visitor.playing = True
    drawn = sent = 0.0
    token_cost = plot_cost = 0.0  # seconds an update took to build and send without plots / more with plots
    try:
        if check is not None:
            check()
        while not visitor.pause.is_set():
            started = time.monotonic()
            if hold:
                more = advance()
            else:
                with visitor.exclusive(activity):
                    more = advance()
            now = time.monotonic()
            if more and pace.interval is None and now - sent < pace.max_speed_update_s:
                yield Update(send=False, plots=False)  # faster than the page updates: shown with the next update
                continue
            spacing = (max(pace.max_speed_plot_interval_s, plot_cost / PLOT_SHARE) if pace.interval is None
                       else pace.plot_interval_s)
            plots = not more or now - drawn >= spacing
            yield Update(send=True, plots=plots, last=not more)
            took = time.monotonic() - now  # the update's views were built and sent meanwhile
            if plots:
                plot_cost = max(0.0, took - token_cost)
            else:
                token_cost = took
            sent = now
            if plots:
                drawn = now
            if not more:
                break
            wait_for_pace(visitor.pause, started, pace.interval)
    finally:
        visitor.playing = False
        if hold:
            visitor.release()
