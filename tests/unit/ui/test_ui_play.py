"""Play's loop (inspector/ui/play.py): at max speed the open view's plots are spaced by what they cost."""

from __future__ import annotations

import time

from inspector.ui.play import PLOT_INTERVAL_S, PLOT_SHARE, PlayPace, play_steps
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
    sent, elapsed = play(150, 0.01, 0.08, PlayPace(None))
    plotted = [u for u in sent if u.plots]
    assert sent[-1].last and sent[-1].plots  # the last step always shows its plots
    # each redraw costs 0.08 s: spaced by 0.08 / PLOT_SHARE = 0.8 s, not PLOT_INTERVAL_S (0.4 s); the first and
    # the last step's come on top
    assert 0.08 / PLOT_SHARE > PLOT_INTERVAL_S
    assert len(plotted) <= elapsed * PLOT_SHARE / 0.08 + 2
    assert len(plotted) >= 3  # still redrawn while Play goes on


def test_at_max_speed_cheap_plots_keep_the_plot_interval():
    sent, elapsed = play(150, 0.01, 0.005, PlayPace(None))
    plotted = [u for u in sent if u.plots]
    # 0.005 / PLOT_SHARE = 0.05 s < PLOT_INTERVAL_S: the interval alone spaces them
    assert elapsed / PLOT_INTERVAL_S - 1 <= len(plotted) <= elapsed / PLOT_INTERVAL_S + 2


def test_at_a_set_speed_plots_keep_the_plot_interval_whatever_they_cost():
    sent, elapsed = play(24, 0.01, 0.3, PlayPace(0.1))  # 10 steps a second; a redraw costs 0.3 s
    plotted = [u for u in sent if u.plots]
    # spaced by PLOT_INTERVAL_S plus the redraw and a step (0.8 s), not by 0.3 / PLOT_SHARE = 3 s
    assert len(sent) == 24 and len(plotted) >= elapsed / (PLOT_INTERVAL_S + 0.3 + 0.1) - 1 >= 3
