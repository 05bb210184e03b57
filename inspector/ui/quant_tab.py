"""The Quantization lab tab: the page's model at another precision, compared with fp32 token by token.

`build_quant_tab(ctx)` lays out the precision selector (fp32 / bf16 / int8 / int4-g32 / int4-g64 /
int4-g128), the KV cache precision (fp32 / int8), Run, a step selector, a weight-matrix selector and
the views of `inspector.viz.quant`: weights memory per precision (planned from shapes, no build), decode
speed per precision (measured, as the runs measure them), the run's per-step KL / top-1 strip, the per-layer
residual cosine, the two next-token distributions of the selected step, one matrix's histogram before and
after quantization.

Run uses the page's prompt, chat toggle, system prompt and max new tokens (caps first: `admit_prompt`,
`admit_max_new`). On the decode thread, under the entry's lock: the fp32 greedy continuation, the chosen
precision teacher-forced on it, and its decode speed with the fp32 peer's (a few steps each, measured once
per precision and kept). The quantized models are process-wide (`QuantLab`, one per server in the session
store's shared state, each scheme built on first use once the server has room for it), never per browser
session; the browser's lab state keeps only the last
`FidelityRecord`. Handlers are module functions of (ctx, ...); bad input is one line in the tab's status
(`shows_refusals`; the step box parses through `inspector.ui.fields`).
"""

from __future__ import annotations

import threading
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.quant.kv_int8 import Int8KVCache, fp32_bytes_per_position
from inspector.quant.lab import PATHS, QuantLab
from inspector.quant.model import planned_weight_bytes
from inspector.quant.records import SchemeStats
from inspector.quant.schemes import CHOICES, check_shapes, parse_kv, parse_scheme
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_process_memory, admit_prompt, planned_quant_nbytes
from inspector.ui.fields import MAX_NEW, FreeSlider
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.validate import Bound
from inspector.viz import inventory as vi
from inspector.viz import quant as vq
from inspector.viz.common import empty_figure, status_line_html
from inspector.viz.precision import quant_lab_note

LAB = "quant"
LABELS = {parse_scheme(c).label: c for c in CHOICES}  # "int4-g32" -> "int4:32"
_labs_lock = threading.Lock()


def lab_for(ctx: TabContext) -> QuantLab:
    """The process-wide lab of the page's model, kept in the session store's shared state (admission counts
    its models once for the server); made on first use, cheap: it builds nothing yet."""
    with _labs_lock:
        lab = ctx.store.shared.get(LAB)
        if lab is None:
            lab = ctx.store.shared[LAB] = QuantLab(ctx.loaded)
        return lab


def admitted_lab(ctx: TabContext, scheme: str) -> QuantLab:
    """The lab, once the server has room for `scheme`'s model when it is not built yet (`admit_process_memory`)."""
    lab = lab_for(ctx)
    if not lab.built(scheme):
        admit_process_memory(ctx.store, ctx.limits, planned_quant_nbytes(ctx.loaded, scheme))
    return lab


def matrices(config: Any) -> list[str]:
    """The matrices the histogram offers: two of the first layer, one of the last, the embedding (= tied head)."""
    last = config.num_hidden_layers - 1
    return ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
            f"model.layers.{last}.mlp.gate_proj.weight", "model.embed_tokens.weight"]


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "quant-status-line")


def scheme_of(label: Any) -> str:
    if label not in LABELS:
        raise InputError(f"unknown precision {str(label)[:40]!r} (choose one of {', '.join(LABELS)})")
    return LABELS[label]


def all_stats(ctx: TabContext, kv: str = "fp32") -> list[SchemeStats]:
    """Every selectable precision that fits the model: planned bytes, path, speed if measured (no model work)."""
    lab, out = lab_for(ctx), []
    for c in CHOICES:
        s = parse_scheme(c)
        try:
            check_shapes(s, ctx.loaded.config)
        except InputError:
            continue
        speed = lab.measured_tok_s(s.name, kv)
        out.append(SchemeStats(s.label, planned_weight_bytes(ctx.loaded.model, s), PATHS[s.weights], speed, kv))
    return out


def _measure(lab: QuantLab, ids: list[int], n: int, scheme: str, kv: str) -> tuple:
    """On the decode thread: the fidelity run, the decode speed of the scheme and of fp32 (kept), and the
    scheme's tensor inventory (entries: plain records)."""
    rec = lab.run(ids, n, scheme, kv)
    stats = lab.stats(scheme, kv)
    lab.decode_tok_s("fp32", kv)
    return rec, stats, list(lab.inventory(scheme).entries)


def figures(ctx: TabContext, state: dict, message: str, error: bool = False) -> tuple:
    """(status, summary, memory, speed, strip, layers, dists, step slider update, inventory)."""
    rec, kv = state.get("record"), state.get("kv", "fp32")
    stats = all_stats(ctx, kv)
    step = min(state.get("step", 0), rec.positions - 1) if rec else 0
    return (status_html(message, error), vq.summary_html(rec, state.get("stats")), vq.memory_figure(stats),
            vq.speed_figure(stats) if any(s.decode_tok_s for s in stats) else empty_figure("Decode speed appears after a run"),
            vq.strip_figure(rec, step) if rec else empty_figure("Per-step KL and top-1 appear after a run"),
            vq.layer_cos_figure(rec) if rec else empty_figure("Per-layer residual cosine appears after a run"),
            vq.dists_figure(rec, step) if rec else empty_figure("The two next-token distributions appear after a run"),
            gr.update(maximum=max(rec.positions - 1, 1) if rec else 1, value=step),
            vi.inventory_html(state["inventory"], ctx.loaded.config.tie_word_embeddings) if state.get("inventory")
            else '<div class="ii-caption">The tensor inventory at the chosen precision appears after a run.</div>')


def _refused_run(message: str, ctx: TabContext, sid: str | None, *_: Any) -> tuple:
    """A refused Run: the status says why; the figures show this browser's last run (or the blank page)."""
    entry = ctx.store.get(sid)
    state = entry.labs.get(LAB) if entry is not None else None
    return figures(ctx, state or {}, message, error=True)


@shows_refusals(_refused_run)
def run_quant(ctx: TabContext, sid: str | None, label: Any, kv: Any, prompt: Any, chat: Any, system: Any,
              max_new: Any) -> tuple:
    """The Run button: caps first, then fp32 greedy, the precision teacher-forced on it, speeds."""
    scheme, kv = scheme_of(label), parse_kv(kv)
    check_shapes(parse_scheme(scheme), ctx.loaded.config)
    n = admit_max_new(MAX_NEW.parse(max_new), ctx.limits)
    admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)
    if len(admitted.ids) + n > ctx.loaded.config.max_position_embeddings:
        raise InputError(f"prompt plus max new tokens exceed the context window "
                         f"({ctx.loaded.config.max_position_embeddings} tokens)")
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        rec, stats, inventory = model_thread.run(_measure, admitted_lab(ctx, scheme), admitted.ids, n, scheme, kv)
        state.update(record=rec, stats=stats, kv=kv, step=rec.first_divergence_step or 0, inventory=inventory)
    return figures(ctx, state, f"{rec.label} (KV {kv}) compared with fp32 on {rec.positions} steps")


def step_bound(positions: int) -> Bound:
    """The step slider over a run of `positions` steps."""
    return Bound("step", True, 0, positions - 1)


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip(), gr.skip()))
def select_step(ctx: TabContext, sid: str | None, step: Any) -> tuple:
    """The step selector: redraw the strip and the two distributions from the kept record (no model work)."""
    entry = ctx.store.get(sid)
    state = entry.labs.get(LAB) if entry is not None else None
    if not state or state.get("record") is None:
        raise InputError("nothing to show yet: press Run first")
    rec = state["record"]
    k = step_bound(rec.positions).parse(step)
    state["step"] = k
    return status_html(f"step {k}"), vq.strip_figure(rec, k), vq.dists_figure(rec, k)


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip()))
def histogram(ctx: TabContext, sid: str | None, label: Any, matrix: Any) -> tuple:
    """One matrix before and after quantization with the chosen precision (built on the decode thread)."""
    scheme = scheme_of(label)
    check_shapes(parse_scheme(scheme), ctx.loaded.config)
    if matrix not in matrices(ctx.loaded.config):
        raise InputError(f"unknown matrix {str(matrix)[:60]!r}")
    entry, _ = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        h = model_thread.run(admitted_lab(ctx, scheme).histogram, scheme, matrix)
    return status_html(f"{matrix}: {h.label} error max {h.max_abs_err:.3g}"), vq.histogram_figure(h)


def build_quant_tab(ctx: TabContext) -> None:
    fast = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
    cfg = ctx.loaded.config
    with gr.Tab("Quantization", elem_id="tab-quant"):
        gr.Markdown(vq.CAPTION + " Uses the page's prompt, chat toggle and max new tokens.", elem_classes="ii-caption")
        gr.Markdown(quant_lab_note(ctx.loaded.source_format or ""), elem_id="quant-precision-note",
                    elem_classes="ii-caption")
        with gr.Row():
            precision = gr.Dropdown(list(LABELS), value="int8", label="weights precision", elem_id="quant-scheme")
            kv = gr.Dropdown(["fp32", "int8"], value="fp32", label="KV cache", elem_id="quant-kv-select")
            run_btn = gr.Button("Run", variant="primary", elem_id="quant-run")
        gr.HTML(vq.kv_html(fp32_bytes_per_position(cfg), Int8KVCache(cfg).bytes_per_position))
        blank = figures(ctx, {}, "choose a precision, then Run")
        status = gr.HTML(blank[0], elem_id="quant-status")
        summary = gr.HTML(blank[1], elem_id="quant-summary-view")
        with gr.Row():
            memory = gr.Plot(blank[2], elem_id="quant-memory", show_label=False)
            speed = gr.Plot(blank[3], elem_id="quant-speed", show_label=False)
        strip = gr.Plot(blank[4], elem_id="quant-strip", show_label=False)
        step = FreeSlider(0, 1, 0, step=1, label="step (its two distributions below)", elem_id="quant-step")
        with gr.Row():
            dists = gr.Plot(blank[6], elem_id="quant-dists", show_label=False)
            layers = gr.Plot(blank[5], elem_id="quant-layers", show_label=False)
        with gr.Row():
            matrix = gr.Dropdown(matrices(cfg), value=matrices(cfg)[0], label="weight matrix", elem_id="quant-matrix")
            hist_btn = gr.Button("Histogram before / after", elem_id="quant-hist-btn")
        hist = gr.Plot(empty_figure("Pick a matrix and press the button"), elem_id="quant-hist", show_label=False)
        with gr.Accordion("Tensor inventory at this precision (bytes held, precision column)", open=False):
            inventory = gr.HTML(blank[8], elem_id="quant-inventory")

    run_btn.click(lambda sid, *a: run_quant(ctx, sid, *a),
                  [ctx.sid, precision, kv, ctx.prompt, ctx.chat, ctx.system, ctx.max_new],
                  [status, summary, memory, speed, strip, layers, dists, step, inventory], **fast)
    step.release(lambda sid, k: select_step(ctx, sid, k), [ctx.sid, step], [status, strip, dists],
                 trigger_mode="always_last", **fast)
    hist_btn.click(lambda sid, p, m: histogram(ctx, sid, p, m), [ctx.sid, precision, matrix], [status, hist], **fast)
