"""Play's loop (inspector/ui/play.py): at max speed the open view's plots are spaced by what they cost."""

from __future__ import annotations

import time

from inspector.ui.play import MAX_SPEED_PLOT_INTERVAL_S, PLOT_INTERVAL_S, PLOT_SHARE, PlayPace, play_steps
from inspector.ui.visitors import Visitor


def play(steps: int, step_s: float, plot_s: float, pace: PlayPace) -> tuple[list, float]:
    """Run play_steps over `steps` steps of `step_s` each; an update with plots takes `plot_s` to build and send.
    Returns the updates sent and the seconds it all took."""
    left = [steps]

    def advance() -> bool:
        time.sleep(step_s)
        left[0] -= 1
        return left[0] > 0

    sent = []
    t0 = time.monotonic()
    for update in play_steps(Visitor(session=None), advance, pace):
        if update.send:
            time.sleep(plot_s if update.plots else 0.001)
            sent.append(update)
    return sent, time.monotonic() - t0


def test_at_max_speed_costly_plots_take_at_most_their_share_of_plays_time():
    # the interval at max speed set to PLOT_INTERVAL_S: spaced by their cost where it is the longer
    sent, elapsed = play(150, 0.01, 0.08, PlayPace(None, max_speed_plot_interval_s=PLOT_INTERVAL_S))
    plotted = [u for u in sent if u.plots]
    assert sent[-1].last and sent[-1].plots  # the last step always shows its plots
    # each redraw costs 0.08 s: spaced by 0.08 / PLOT_SHARE = 0.8 s, not PLOT_INTERVAL_S (0.4 s); the first and
    # the last step's come on top
    assert 0.08 / PLOT_SHARE > PLOT_INTERVAL_S
    assert len(plotted) <= elapsed * PLOT_SHARE / 0.08 + 2
    assert len(plotted) >= 3  # still redrawn while Play goes on


def test_at_max_speed_cheap_plots_keep_the_plot_interval():
    sent, elapsed = play(150, 0.01, 0.005, PlayPace(None, max_speed_plot_interval_s=PLOT_INTERVAL_S))
    plotted = [u for u in sent if u.plots]
    # 0.005 / PLOT_SHARE = 0.05 s < PLOT_INTERVAL_S: the interval alone spaces them
    assert elapsed / PLOT_INTERVAL_S - 1 <= len(plotted) <= elapsed / PLOT_INTERVAL_S + 2


def test_at_max_speed_plots_are_redrawn_at_most_once_a_max_speed_interval():
    # cheap on the server (0.005 / PLOT_SHARE = 0.05 s), but a local browser's redraw is not: the max speed's
    # interval spaces them, not PLOT_INTERVAL_S; the last step still shows its plots
    sent, elapsed = play(300, 0.01, 0.005, PlayPace(None))
    plotted = [u for u in sent if u.plots]
    assert MAX_SPEED_PLOT_INTERVAL_S > PLOT_INTERVAL_S
    assert sent[-1].last and sent[-1].plots
    assert elapsed / MAX_SPEED_PLOT_INTERVAL_S - 1 <= len(plotted) <= elapsed / MAX_SPEED_PLOT_INTERVAL_S + 2
    assert len(sent) > 2 * len(plotted)  # the tokens still reach the page in between


def test_at_a_set_speed_plots_keep_the_plot_interval_whatever_they_cost():
    sent, elapsed = play(24, 0.01, 0.3, PlayPace(0.1))  # 10 steps a second; a redraw costs 0.3 s
    plotted = [u for u in sent if u.plots]
    # spaced by PLOT_INTERVAL_S plus the redraw and a step (0.8 s), not by 0.3 / PLOT_SHARE = 3 s
    assert len(sent) == 24 and len(plotted) >= elapsed / (PLOT_INTERVAL_S + 0.3 + 0.1) - 1 >= 3


def test_unhindered_steps_never_wait_for_the_caller_and_lose_nothing():
    """The steps go on while the caller still handles an update (Gradio sending it): here every other step runs
    while the caller holds the first update; what they made meanwhile arrives merged, the newest values winning."""
    import threading

    from inspector.ui.play import unhindered

    all_made = threading.Event()

    def updates():
        for i in range(20):
            yield {"token": i, **({"plot": i} if i % 7 == 0 else {})}
        all_made.set()

    got = []
    for update in unhindered(updates):
        got.append(update)
        if len(got) == 1:  # held until every step ran (a generous limit: it fails only if the steps wait for us)
            assert all_made.wait(timeout=30)
    assert 1 <= len(got) <= 2  # the first update, then every later one merged into one
    assert got[-1]["token"] == 19  # the newest token
    assert [u["plot"] for u in got if "plot" in u][-1] == 14  # and the newest plot made, never dropped by a merge
    assert [u["token"] for u in got] == sorted(u["token"] for u in got)


def test_unhindered_raises_the_steps_error_after_their_updates_and_closes_them_when_closed():
    from inspector.ui.play import unhindered

    def failing():
        yield {"token": 0}
        raise ValueError("bad step")

    out = []
    try:
        for update in unhindered(failing):
            out.append(update)
    except ValueError as exc:
        assert str(exc) == "bad step"
    else:
        raise AssertionError("the error was not raised")
    assert out == [{"token": 0}]

    ended = []

    def endless():
        try:
            while True:
                time.sleep(0.01)
                yield {"token": 1}
        finally:
            ended.append(True)  # Play's visitor is released here

    gen = unhindered(endless)
    next(gen)
    gen.close()  # the page went away
    deadline = time.monotonic() + 2
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended == [True]
