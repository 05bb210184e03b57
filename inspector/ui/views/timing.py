"""The Timing view: where the run's time went, per step, and per operation of one step.

Slot: the time to first token and every decode step's time (forward, sampling, recording). On a mixture of
experts' page a second slot, the weights each step read (`weights_read_chart`): the shared weights plus, in
each layer, the experts that step's tokens went to (from the run's routing), against every weight held; the
byte sizes come from the page model's tensor inventory (`weights_read_sizes`). A dense model's page has the
first slot only (the view narrows `slots` to its model's). Below them, "Time operations"
(`OpTimingSection`) re-runs a chosen step's forward with a timer at every trace point
(`inspector.session.op_timing.time_step_ops`, on the prefill thread under the browser's lock; the session's
records and cache are not changed), reads the machine's roofline peaks (the Serving lab's, measured once
and cached beside the model), and draws the table, the per-layer grid and the roofline
(`inspector.viz.optiming`). Bad input is one line in the section's status.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from inspector.errors import InputError
from inspector.models.inventory import EMBEDDING, Inventory, is_expert_group
from inspector.serving.roofline import cached_peaks, peaks_directory
from inspector.session.op_timing import MAX_REPEATS, time_step_ops
from inspector.ui import model_thread
from inspector.ui.fields import OP_STEP, FreeNumber, op_runs_bound
from inspector.ui.figure import Figure
from inspector.ui.panel import Page, Panel, Slot, ViewPanel
from inspector.ui.refusals import refuses
from inspector.ui.visitors import Visitor
from inspector.viz import optiming as vo
from inspector.viz import timing as vt
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"
OP_RUNS = op_runs_bound(MAX_REPEATS)
WEIGHTS_CAPTION = ("Weights read (a mixture of experts): a step reads the shared weights (attention, routers, "
                   "norms, the LM head) and, in each layer, only the experts its tokens went to, counted from this "
                   "run's routing: a decode step's k per layer, a prefill's union over the prompt's tokens. The "
                   "dotted line is every weight memory holds. Bytes counted from the tensors, not measured; an "
                   "untied embedding table is left out (a step reads only its tokens' rows).")


def weights_read_sizes(inventory: Inventory, num_layers: int, num_experts: int, tied: bool) -> tuple[int, int, int]:
    """(shared bytes a step reads, bytes of one expert of one layer, bytes of every weight held) of a mixture
    of experts' tensor inventory; the shared bytes leave out an untied embedding table."""
    experts = sum(e.bytes for e in inventory.entries if is_expert_group(e.group))
    unread = 0 if tied else sum(e.bytes for e in inventory.entries if e.name == EMBEDDING)
    return inventory.bytes - experts - unread, experts // (num_layers * num_experts), inventory.bytes


def peaks_for(loaded: Any) -> Any:
    """The machine's roofline peaks for the page model's dtype and device (None when they cannot be had)."""
    try:
        return cached_peaks(peaks_directory(loaded.weights_path), loaded.dtype, getattr(loaded, "device", "cpu"))
    except (OSError, RuntimeError):
        return None


class TimingView(ViewPanel):
    key = "timing"  # its tab: the view "timing" of inspector.viz.registry
    caption = vt.CAPTION
    slots = (Slot("timing_fig", "timing-chart", plot=True), Slot("weights_fig", "weights-read-chart", plot=True))

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.ops = OpTimingSection(page)
        cfg = page.loaded.config
        self.moe = bool(cfg.moe)
        if not self.moe:
            self.slots = self.slots[:1]  # a dense model reads every weight each step: no weights-read chart

    @cached_property
    def sizes(self) -> tuple[int, int, int]:
        """`weights_read_sizes` of the page's model (a mixture of experts)."""
        cfg = self.page.loaded.config
        return weights_read_sizes(self.page.inventory, cfg.num_hidden_layers, cfg.num_experts, cfg.tie_word_embeddings)

    def layout(self) -> None:
        self.caption_md()
        self.slot("timing_fig")
        if self.moe:
            self.caption_md(WEIGHTS_CAPTION)
            self.slot("weights_fig")
        self.ops.layout()

    def wire(self) -> None:
        self.ops.wire()

    def blank(self) -> dict[str, Any]:
        return {s.key: empty_figure(HINT) for s in self.slots}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        records = visitor.session.records
        views = {"timing_fig": vt.timing_chart(records)}
        if self.moe:
            views["weights_fig"] = vt.weights_read_chart(records, *self.sizes)
        return views


class OpTimingSection(Panel):
    """Part of the Timing view: "Time operations" (see the module docstring)."""

    key, title, tab_id = "op_timing", "Time operations", "op-timing-view"
    status_id = "op-timing-status"

    def layout(self) -> None:
        import gradio as gr

        gr.Markdown(vo.CAPTION, elem_classes="ii-caption")
        with gr.Row():
            self.step = FreeNumber(-1, label=OP_STEP.name + " (-1 = newest, 0 = prefill)", precision=0,
                                   elem_id="op-step", min_width=120)
            self.runs = FreeNumber(3, label=OP_RUNS.name, precision=0, elem_id="op-runs", min_width=100)
            self.button = gr.Button("Time operations", elem_id="op-time-btn", size="sm")
        self.show("status", gr.HTML(self.status("Time operations re-runs a step's forward with a timer at every "
                                                "trace point")))
        self.show("table", gr.HTML('<div id="op-timing"></div>', elem_id="op-timing-view"))
        self.show("roofline", Figure(empty_figure("press Time operations"), elem_id="op-roofline", show_label=False))

    def wire(self) -> None:
        self.on(self.button.click, self.time_operations, [self.page.sid, self.step, self.runs],
                show_progress="minimal")

    @refuses
    def time_operations(self, sid: Any, step: Any, runs: Any) -> dict[str, Any]:
        """The button: time one step's operations."""
        step, runs = OP_STEP.parse(step), OP_RUNS.parse(runs)
        visitor = self.page.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records:
            raise InputError("nothing to time yet: press Prefill first")
        newest = len(visitor.session.records) - 1
        if step > newest:
            raise InputError(f"step to time must be -1 or 0..{newest} (this run's steps), got {step}")
        with visitor.exclusive("time operations"):
            timing = model_thread.call_prefill(time_step_ops, visitor.session, step, runs)
        peaks = model_thread.call_prefill(peaks_for, self.page.loaded)
        done = f"timed {timing.kind} step {timing.step}: {timing.seconds * 1e3:.2f} ms over {len(timing.totals)} operations"
        return {"status": self.status(done), "table": vo.op_table_html(timing, peaks) + vo.op_layers_html(timing),
                "roofline": vo.op_roofline(timing, peaks)}
