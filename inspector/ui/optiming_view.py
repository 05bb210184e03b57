"""The Timing view's per-operation section: "Time operations" re-runs a chosen step's forward with a timer.

`build_op_timing(h, sid)` lays out, inside the Timing tab, a step box (-1 = the newest, 0 = the prefill), a
runs box and the button; the handler runs `inspector.session.op_timing.time_step_ops` on the prefill thread
under the browser's lock (the session's records and cache are not changed), reads the machine's roofline
peaks (the Serving lab's, measured once and cached beside the model), and draws the table, the per-layer
grid and the roofline (`inspector.viz.optiming`). Bad input is one line in the section's status.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.serving.roofline import cached_peaks, peaks_directory
from inspector.session.op_timing import MAX_REPEATS, time_step_ops
from inspector.ui import model_thread
from inspector.ui.fields import FreeNumber
from inspector.ui.refusals import shows_refusals
from inspector.validate import Bound
from inspector.viz import optiming as vo
from inspector.viz.common import empty_figure, status_line_html

OP_STEP = Bound("step to time", True, -1, note="(-1 = the newest, 0 = the prefill)")
OP_RUNS = Bound("timed runs", True, 1, MAX_REPEATS)


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "op-timing-status")


def peaks_for(loaded: Any) -> Any:
    """The machine's roofline peaks for the page model's dtype and device (None when they cannot be had)."""
    try:
        return cached_peaks(peaks_directory(loaded.weights_path), loaded.dtype, getattr(loaded, "device", "cpu"))
    except (OSError, RuntimeError):
        return None


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip(), gr.skip()))
def time_operations(h: Any, sid: Any, step: Any, runs: Any) -> tuple:
    """The button: time one step's operations; (status, tables, roofline figure)."""
    step, runs = OP_STEP.parse(step), OP_RUNS.parse(runs)
    entry = h.store.get(sid)
    if entry is None or entry.session is None or not entry.session.records:
        raise InputError("nothing to time yet: press Prefill first")
    newest = len(entry.session.records) - 1
    if step > newest:
        raise InputError(f"step to time must be -1 or 0..{newest} (this run's steps), got {step}")
    with entry.exclusive("time operations"):
        timing = model_thread.run_prefill(time_step_ops, entry.session, step, runs)
    peaks = model_thread.run_prefill(peaks_for, h.loaded)
    done = f"timed {timing.kind} step {timing.step}: {timing.seconds * 1e3:.2f} ms over {len(timing.totals)} operations"
    return (status_html(done), vo.op_table_html(timing, peaks) + vo.op_layers_html(timing),
            vo.op_roofline(timing, peaks))


def build_op_timing(h: Any, sid: Any) -> None:
    """The section's controls and outputs (call inside the Timing tab)."""
    gr.Markdown(vo.CAPTION, elem_classes="ii-caption")
    with gr.Row():
        step = FreeNumber(-1, label=OP_STEP.name + " (-1 = newest, 0 = prefill)", precision=0, elem_id="op-step",
                          min_width=120)
        runs = FreeNumber(3, label=OP_RUNS.name, precision=0, elem_id="op-runs", min_width=100)
        button = gr.Button("Time operations", elem_id="op-time-btn", size="sm")
    status = gr.HTML(status_html("Time operations re-runs a step's forward with a timer at every trace point"))
    table = gr.HTML('<div id="op-timing"></div>', elem_id="op-timing-view")
    roof = gr.Plot(empty_figure("press Time operations"), elem_id="op-roofline", show_label=False)
    button.click(partial(time_operations, h), [sid, step, runs], [status, table, roof], show_progress="minimal",
                 api_visibility="undocumented")
