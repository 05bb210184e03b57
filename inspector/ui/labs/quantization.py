"""The Quantization lab: the page's model at another precision, compared with fp32 token by token.

The tab lays out the precision selector (fp32 / bf16 / int8 / int4-g32 / int4-g64 / int4-g128), the KV
cache precision (fp32 / int8), Run, a step selector, a weight-matrix selector and the views of
`inspector.viz.quant`: weights memory per precision (planned from shapes, no build), decode speed per
precision (measured, as the runs measure them), the run's per-step KL / top-1 strip, the per-layer residual
cosine, the two next-token distributions of the selected step, one matrix's histogram before and after
quantization, and the tensor inventory at that precision.

Run uses the page's prompt, chat toggle, system prompt and max new tokens (caps first: `admit_prompt`,
`admit_max_new`). On the decode thread, under the visitor's lock: the fp32 greedy continuation, the chosen
precision teacher-forced on it, and its decode speed with the fp32 peer's (a few steps each, measured once
per precision and kept). The quantized models are process-wide (`QuantLab`, one per server in the session
store's shared state, each scheme built on first use once the server has room for it: admission counts them
once), never per browser session; this panel's state keeps the last `FidelityRecord` and what it shows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from inspector.errors import InputError
from inspector.quant.kv_int8 import Int8KVCache, fp32_bytes_per_position
from inspector.quant.lab import PATHS, QuantLab
from inspector.quant.model import planned_weight_bytes
from inspector.quant.measurements import SchemeStats
from inspector.quant.schemes import CHOICES, check_shapes, parse_kv, parse_scheme
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_process_memory, admit_prompt, planned_quant_nbytes
from inspector.ui.fields import FreeSlider, quant_step_bound
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.viz import inventory as vi
from inspector.viz import quant as vq
from inspector.viz.common import empty_figure
from inspector.viz.precision import quant_lab_note

LABELS = {parse_scheme(c).label: c for c in CHOICES}  # "int4-g32" -> "int4:32"
SHARED = "quant"  # the visitor store's shared state of the process-wide lab
_labs_lock = threading.Lock()


def matrices(config: Any) -> list[str]:
    """The matrices the histogram offers: two of the first layer, one of the last, the embedding (= tied head)."""
    last = config.num_hidden_layers - 1
    return ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
            f"model.layers.{last}.mlp.gate_proj.weight", "model.embed_tokens.weight"]


def scheme_of(label: Any) -> str:
    if label not in LABELS:
        raise InputError(f"unknown precision {str(label)[:40]!r} (choose one of {', '.join(LABELS)})")
    return LABELS[label]


@dataclass
class QuantState(PanelState):
    record: Any = None  # inspector.quant.measurements.FidelityRecord of the last run
    stats: Any = None  # its SchemeStats
    kv: str = "fp32"
    step: int = 0
    inventory: list = field(default_factory=list)  # the chosen precision's tensor inventory entries


class QuantizationLab(Panel):
    key, title, tab_id = "quant", "Quantization", "tab-quant"
    status_id = "quant-status-line"
    State = QuantState

    def lab(self) -> QuantLab:
        """The process-wide lab of the page's model, kept in the visitor store's shared state (admission counts
        its models once for the server); made on first use, cheap: it builds nothing yet."""
        store = self.page.store
        with _labs_lock:
            lab = store.shared.get(SHARED)
            if lab is None:
                lab = store.shared[SHARED] = QuantLab(self.page.loaded)
            return lab

    def admitted_lab(self, scheme: str) -> QuantLab:
        """The lab, once the server has room for `scheme`'s model when it is not built yet."""
        lab = self.lab()
        if not lab.built(scheme):
            admit_process_memory(self.page.store, self.page.limits, planned_quant_nbytes(self.page.loaded, scheme))
        return lab

    def all_stats(self, kv: str = "fp32") -> list[SchemeStats]:
        """Every selectable precision that fits the model: planned bytes, path, speed if measured (no model work)."""
        lab, out = self.lab(), []
        for c in CHOICES:
            s = parse_scheme(c)
            try:
                check_shapes(s, self.page.loaded.config)
            except InputError:
                continue
            speed = lab.measured_tok_s(s.name, kv)
            out.append(SchemeStats(s.label, planned_weight_bytes(self.page.loaded.model, s), PATHS[s.weights], speed, kv))
        return out

    def views(self, state: QuantState, message: str, error: bool = False) -> dict[str, Any]:
        """Every output from the kept run (placeholders before one)."""
        import gradio as gr

        rec, kv = state.record, state.kv
        stats = self.all_stats(kv)
        step = min(state.step, rec.positions - 1) if rec else 0
        tied = self.page.loaded.config.tie_word_embeddings
        return {
            "status": self.status(message, error), "summary": vq.summary_html(rec, state.stats),
            "memory": vq.memory_figure(stats),
            "speed": vq.speed_figure(stats) if any(s.decode_tok_s for s in stats)
            else empty_figure("Decode speed appears after a run"),
            "strip": vq.strip_figure(rec, step) if rec else empty_figure("Per-step KL and top-1 appear after a run"),
            "layers": vq.layer_cos_figure(rec) if rec else empty_figure("Per-layer residual cosine appears after a run"),
            "dists": vq.dists_figure(rec, step) if rec
            else empty_figure("The two next-token distributions appear after a run"),
            "step": gr.update(maximum=max(rec.positions - 1, 1) if rec else 1, value=step),
            "inventory": vi.inventory_html(state.inventory, tied) if state.inventory
            else '<div class="ii-caption">The tensor inventory at the chosen precision appears after a run.</div>'}

    def layout(self) -> None:
        import gradio as gr

        loaded = self.page.loaded
        cfg = loaded.config
        gr.Markdown(vq.CAPTION + " Uses the page's prompt, chat toggle and max new tokens.", elem_classes="ii-caption")
        gr.Markdown(quant_lab_note(loaded.source_format or "", loaded.source_types), elem_id="quant-precision-note", elem_classes="ii-caption")
        with gr.Row():
            self.precision = gr.Dropdown(list(LABELS), value="int8", label="weights precision", elem_id="quant-scheme")
            self.kv = gr.Dropdown(["fp32", "int8"], value="fp32", label="KV cache", elem_id="quant-kv-select")
            self.run_btn = gr.Button("Run", variant="primary", elem_id="quant-run")
        gr.HTML(vq.kv_html(fp32_bytes_per_position(cfg), Int8KVCache(cfg).bytes_per_position))
        blank = self.views(QuantState(), "choose a precision, then Run")
        self.show("status", gr.HTML(blank["status"], elem_id="quant-status"))
        self.show("summary", gr.HTML(blank["summary"], elem_id="quant-summary-view"))
        with gr.Row():
            self.show("memory", Figure(blank["memory"], elem_id="quant-memory", show_label=False))
            self.show("speed", Figure(blank["speed"], elem_id="quant-speed", show_label=False))
        self.show("strip", Figure(blank["strip"], elem_id="quant-strip", show_label=False))
        self.show("step", FreeSlider(0, 1, 0, step=1, label="step (its two distributions below)", elem_id="quant-step"))
        with gr.Row():
            self.show("dists", Figure(blank["dists"], elem_id="quant-dists", show_label=False))
            self.show("layers", Figure(blank["layers"], elem_id="quant-layers", show_label=False))
        with gr.Row():
            self.matrix = gr.Dropdown(matrices(cfg), value=matrices(cfg)[0], label="weight matrix",
                                      elem_id="quant-matrix")
            self.hist_btn = gr.Button("Histogram before / after", elem_id="quant-hist-btn")
        self.show("histogram", Figure(empty_figure("Pick a matrix and press the button"), elem_id="quant-hist",
                                      show_label=False))
        with gr.Accordion("Tensor inventory at this precision (bytes held, precision column)", open=False):
            self.show("inventory", gr.HTML(blank["inventory"], elem_id="quant-inventory"))

    def wire(self) -> None:
        p = self.page
        self.on(self.run_btn.click, self.compare, [p.sid, self.precision, self.kv, p.prompt, p.chat, p.system, p.max_new],
                ["status", "summary", "memory", "speed", "strip", "layers", "dists", "step", "inventory"])
        self.on(self.outputs["step"].release, self.select_step, [p.sid, self.outputs["step"]],
                ["status", "strip", "dists"], trigger_mode="always_last")
        self.on(self.hist_btn.click, self.histogram, [p.sid, self.precision, self.matrix], ["status", "histogram"])

    @staticmethod
    def _measure(lab: QuantLab, ids: list[int], n: int, scheme: str, kv: str) -> tuple:
        """On the decode thread: the fidelity run, the decode speed of the scheme and of fp32 (kept), and the
        scheme's tensor inventory (entries: plain records)."""
        rec = lab.compare(ids, n, scheme, kv)
        stats = lab.stats(scheme, kv)
        lab.decode_tok_s("fp32", kv)
        return rec, stats, list(lab.inventory(scheme).entries)

    @refuses
    def compare(self, sid: str | None, label: Any, kv: Any, prompt: Any, chat: Any, system: Any,
            max_new: Any) -> dict[str, Any]:
        """The Run button: caps first, then fp32 greedy, the precision teacher-forced on it, speeds."""
        loaded, limits = self.page.loaded, self.page.limits
        scheme, kv = scheme_of(label), parse_kv(kv)
        check_shapes(parse_scheme(scheme), loaded.config)
        n = admit_max_new(max_new, limits)
        admitted = admit_prompt(loaded, limits, prompt, bool(chat), system)
        if len(admitted.ids) + n > loaded.config.max_position_embeddings:
            raise InputError(f"prompt plus max new tokens exceed the context window "
                             f"({loaded.config.max_position_embeddings} tokens)")
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            rec, stats, inventory = model_thread.call(self._measure, self.admitted_lab(scheme), admitted.ids, n,
                                                     scheme, kv)
            state.record, state.stats, state.kv, state.inventory = rec, stats, kv, inventory
            state.step = rec.first_divergence_step or 0
        return self.views(state, f"{rec.label} (KV {kv}) compared with fp32 on {rec.positions} steps")

    @refuses
    def select_step(self, sid: str | None, step: Any) -> dict[str, Any]:
        """The step selector: redraw the strip and the two distributions from the kept record (no model work)."""
        state = self.kept(sid)
        if state is None or state.record is None:
            raise InputError("nothing to show yet: press Run first")
        rec = state.record
        state.step = quant_step_bound(rec.positions).parse(step)
        return {"status": self.status(f"step {state.step}"), "strip": vq.strip_figure(rec, state.step),
                "dists": vq.dists_figure(rec, state.step)}

    @refuses
    def histogram(self, sid: str | None, label: Any, matrix: Any) -> dict[str, Any]:
        """One matrix before and after quantization with the chosen precision (built on the decode thread)."""
        scheme = scheme_of(label)
        check_shapes(parse_scheme(scheme), self.page.loaded.config)
        if matrix not in matrices(self.page.loaded.config):
            raise InputError(f"unknown matrix {str(matrix)[:60]!r}")
        visitor, _ = self.state(sid)
        with visitor.exclusive(self.key):
            h = model_thread.call(self.admitted_lab(scheme).histogram, scheme, matrix)
        return {"status": self.status(f"{matrix}: {h.label} error max {h.max_abs_err:.3g}"),
                "histogram": vq.histogram_figure(h)}
