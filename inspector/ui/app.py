"""`build_app(loaded=None) -> gr.Blocks`: the Inference Inspector page — layout and wiring only.

Handlers live in `inspector.ui.handlers`, figures in `inspector.viz`. The browser's `gr.State` holds
only a session id; the per-session engine state lives in a `SessionStore` and is freed when the State
is deleted (time-to-live) or the page unloads. Theme, CSS and JS go to `launch()` (Gradio 6): use
`launch_kwargs()`. The views are `ViewSlot`s that Gradio never updates: every view event has one output,
the `ViewBundle` of the views it changed (`inspector.ui.bundle`). Besides the views: branching
(`inspector.ui.branch_handlers`), links that reproduce a run (`inspector.ui.link_handlers`), trace files
(`inspector.ui.trace_io`), and the lab tabs listed in `LAB_TABS` (`inspector.ui.tab_context`).

Named API endpoints for scripts (gradio_client): `prefill` and `step`, each returning a dict with
`text`, `prompt_ids`, `generated_ids`, `pieces`, `phase`, `finished`, `ttft_ms`, `last_tpot_ms`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

from inspector.ui import api, link_handlers, trace_io
from inspector.ui.handlers import VIEW_KEYS, Handlers
from inspector.ui.interventions_tab import build_interventions_tab
from inspector.ui.bundle import ViewBundle, ViewSlot, bundled
from inspector.ui.app_model import app_limits, load_app_model
from inspector.ui.beams_tab import build_beams_tab
from inspector.ui.decoding_controls import build_decoding_controls, link_values, wire_decoding_controls
from inspector.ui.fields import (MAX_NEW, MIN_P, SEED, TEMPERATURE_UI, TOP_K_UI, TOP_P, FreeNumber, head_bound,
                                 layer_bound, slider)
from inspector.ui.kv_view_policy import build_kv_policy_panel
from inspector.ui.kvpolicy_tab import build_kvpolicy_tab
from inspector.ui.models_tab import build_models_tab
from inspector.ui.optiming_view import build_op_timing
from inspector.ui.quant_tab import build_quant_tab
from inspector.ui.serving_tab import build_serving_tab
from inspector.ui.speculative_tab import build_speculative_tab
from inspector.ui.training_tab import build_training_tab
from inspector.ui.sessions import SessionStore, new_ui_session
from inspector.ui.play_speed import build_speed_controls
from inspector.ui.selections import build_pin, fresh_selections, reselect_pinned
from inspector.ui.system_prompt import system_note_html, template_system
from inspector.ui.tour_panel import TOUR_CSS_FILE, build_tour_button, build_tour_panel
from inspector.ui.tab_context import TabContext
from inspector.viz import attention as va
from inspector.viz import inventory as vi
from inspector.viz import kvcache as vk
from inspector.viz import residual as vr
from inspector.viz import sampling as vs
from inspector.viz import timing as vt
from inspector.viz import tokens as vtok
from inspector.viz.header import model_header_html
from inspector.viz.precision import precision_note

STATIC = Path(__file__).resolve().parents[2] / "static"

EXAMPLES = [
    ["What is gravity?", True],
    ["The capital of France is", False],
    ["Write a haiku about the sea.", True],
    ["def fibonacci(n):", False],
]
FAST = {"show_progress": "hidden", "concurrency_limit": None}
# The last link of the page-load chain marks the page: until then a load step may still write the controls
# (a run link's values), so browser tests and scripts wait for `body[data-inspector-loaded]`.
PAGE_READY_JS = "() => { document.body.dataset.inspectorLoaded = '1'; }"
# Lab tabs after the views, in order: each module `inspector/ui/<name>_tab.py` has `build_<name>_tab(ctx)`
LAB_TABS = (build_speculative_tab, build_serving_tab, build_quant_tab, build_kvpolicy_tab, build_interventions_tab,
            build_models_tab, build_training_tab)


def launch_kwargs() -> dict[str, Any]:
    """theme / css / js for `demo.launch(...)` (Gradio 6 takes them there, not in Blocks)."""
    return {
        "theme": gr.themes.Default(primary_hue="indigo"),  # LocalFont only: no Google Fonts request
        "css": (STATIC / "app.css").read_text(encoding="utf-8") + TOUR_CSS_FILE.read_text(encoding="utf-8"),
        "js": (STATIC / "app.js").read_text(encoding="utf-8"),
    }


def model_facts(loaded: Any) -> tuple[list, int, int]:
    """(inventory entries, parameter count, weight bytes in memory) for the header and inventory view."""
    from inspector.models.inventory import build_inventory

    inv = build_inventory(loaded)
    return list(inv.entries), inv.params, inv.bytes


def build_app(loaded: Any = None) -> gr.Blocks:
    """The whole page over one loaded model (loaded here when not given)."""
    if loaded is None:
        loaded = load_app_model()
    limits = app_limits()
    store = SessionStore(lambda: new_ui_session(loaded), limits)
    entries, n_params, weight_bytes = model_facts(loaded)
    h = Handlers(loaded, store, limits, entries, weight_bytes)
    cfg = loaded.config
    dtype = str(loaded.dtype).replace("torch.", "")

    with gr.Blocks(title="Inference Inspector") as demo:
        demo.store = store  # tests and bench look at live sessions
        # The callback must be a plain function, never `store.drop`: Gradio deep-copies the page config on
        # every GET /config (each page load, each gradio_client), and a bound method would copy the store
        # through it: every live session and the model's weights (deepcopy keeps functions as they are).
        sid = gr.State(None, time_to_live=limits.session_ttl_s, delete_callback=lambda sid: store.drop(sid))
        gr.HTML(model_header_html(loaded.name, n_params, dtype, cfg, weight_bytes, loaded.source_format,
                                  loaded.source_bytes, precision_note(loaded.source_format or "", dtype)))
        # First screen (1400x900): a prompt bar with the run buttons, settings folded away, then the tokens
        # beside the views, so after Prefill the tokens and the open view's main plot are both in sight.
        with gr.Row(equal_height=False, elem_id="prompt-bar"):
            prompt = gr.Textbox(label="Prompt", lines=2, max_lines=6, elem_id="prompt", scale=5, min_width=260,
                                placeholder="Type a prompt, then Prefill (→ steps, space plays/pauses)")
            with gr.Column(scale=4, min_width=300, elem_id="run-controls"):
                with gr.Row(elem_classes="ii-buttons"):
                    prefill_btn = gr.Button("Prefill", variant="primary", elem_id="prefill-btn", size="sm")
                    step_btn = gr.Button("Step →", elem_id="step-btn", size="sm")
                    play_btn = gr.Button("Play ▶", elem_id="play-btn", size="sm")
                    pause_btn = gr.Button("Pause", elem_id="pause-btn", size="sm")
                    reset_btn = gr.Button("Reset", variant="stop", elem_id="reset-btn", size="sm")
                    build_tour_button()  # reopens the guided tour (static/tour.js)
                    link_btn = gr.Button("Link to this run", elem_id="link-btn", size="sm", min_width=110)
                with gr.Row(elem_classes="ii-options"):
                    chat = gr.Checkbox(True, label="Chat template", elem_id="chat-toggle", min_width=120)
                    max_new = FreeNumber(32, label=MAX_NEW.name, precision=0, elem_id="max-new-tokens",
                                         min_width=110)
                    speed, fastest = build_speed_controls()  # Play's pace (inspector.ui.play_speed)
        with gr.Accordion("Sampling, system prompt, example prompts", open=False, elem_id="settings"):
            with gr.Row():
                temperature = slider(TEMPERATURE_UI, 0.0, 0.05, "temperature (0 = greedy)", "temperature")
                top_k = slider(TOP_K_UI, 0, 1, "top-k (0 = off)", "top-k")
                top_p = slider(TOP_P, 1.0, 0.01, "top-p", "top-p")
                min_p = slider(MIN_P, 0.0, 0.01, "min-p", "min-p")
            with gr.Row():
                seed = FreeNumber(0, label=SEED.name, precision=0, elem_id="seed", min_width=100)
                system_info = template_system(loaded.tokenizer)
                system = gr.Textbox(label="System prompt (chat only, optional)", lines=1,
                                    elem_id="system-prompt", scale=4, placeholder=system_info.default or "")
            system_note = gr.HTML(system_note_html(system_info, True, ""), elem_id="system-note-view")
            decoding = build_decoding_controls()  # penalties, bans, stop, constraint, beams (Sampling view stages)
            gr.Examples(EXAMPLES, inputs=[prompt, chat], label="Example prompts")
        with gr.Row(equal_height=False, elem_id="workspace"):
            with gr.Column(scale=2, min_width=280, elem_id="token-column"):
                ViewSlot("status", "status")
                gr.Markdown(vtok.CAPTION, elem_classes="ii-caption")
                ViewSlot("chips", "tokens")
                ViewSlot("text", "text")
                ViewSlot("branches", "branches")  # the branch tree, once the run has branched
                with gr.Row(elem_classes="ii-trace-row"):
                    save_trace_btn = gr.Button("Save trace", elem_id="trace-save-btn", size="sm", min_width=90)
                    open_trace_btn = gr.UploadButton("Open trace", elem_id="trace-open-btn", size="sm", min_width=90,
                                                     file_types=[".safetensors"], file_count="single")
                trace_file = gr.File(label="trace file (safetensors: reopen it with Open trace, or `inspector trace`)",
                                     elem_id="trace-file", visible=False, interactive=False)
                run_link = gr.Textbox(label="link to this run (opening it runs the same prompt, settings, steps and "
                                            "branches)", elem_id="run-link", interactive=False, buttons=["copy"],
                                      visible=False)
                link_query = gr.Textbox(elem_id="link-query", elem_classes="ii-offscreen", container=False)
                # what static/app.js sends for a click on a "what if" candidate ("step:token id") or a branch
                branch_request = gr.Textbox(elem_id="branch-request", elem_classes="ii-offscreen", container=False)
                branch_switch = gr.Textbox(elem_id="branch-switch", elem_classes="ii-offscreen", container=False)
                position = FreeNumber(-1, label="selected position (click a token; -1 = newest)", precision=0,
                                      elem_id="position")
                pin = build_pin()  # keep layer / head / position across runs (inspector.ui.selections)
            with gr.Column(scale=5, min_width=320, elem_id="view-column"):
                ViewSlot("pipeline", "pipeline")  # the stages of the newest step, along the top of the views
                ctx = TabContext(loaded, store, limits, sid, prompt, chat, system,
                                 (temperature, top_k, top_p, min_p, seed), max_new)
                # Two groups, each a tab row that wraps (never Gradio's overflow menu): every label is in sight
                # at 1280 px and on a 390 px phone. static/app.js `openTab` opens a label's group first.
                with gr.Tabs(elem_id="tab-groups"):
                    with gr.Tab("Views", elem_id="tab-views"):
                        with gr.Tabs(overflow_behavior="wrap", elem_id="view-tabs"):
                            with gr.Tab("Residual stream", elem_id="tab-residual") as tab_residual:
                                gr.Markdown(vr.CAPTION, elem_classes="ii-caption")
                                ViewSlot("resid_heat", "resid-heatmap")  # an image (inspector.viz.heatimage)
                                ViewSlot("resid_pos", "resid-position", plot=True)
                                ViewSlot("lens", "logit-lens-view")
                            with gr.Tab("Attention", elem_id="tab-attention") as tab_attention:
                                gr.Markdown(va.CAPTION, elem_classes="ii-caption")
                                with gr.Row():
                                    layer = slider(layer_bound(cfg), 0, 1, "layer", "attn-layer")
                                    head = slider(head_bound(cfg), 0, 1, "query head", "attn-head")
                                ViewSlot("attn_info", "attn-info")
                                ViewSlot("attn_fig", "attn-pattern", plot=True)
                                ViewSlot("attn_overview", "attn-overview")  # an image (inspector.viz.heatimage)
                            with gr.Tab("KV cache", elem_id="tab-kv") as tab_kv:
                                gr.Markdown(vk.CAPTION, elem_classes="ii-caption")
                                ViewSlot("kv_summary", "kv-summary-view")
                                with gr.Row():
                                    ViewSlot("kv_bars", "kv-bars", plot=True)
                                    ViewSlot("kv_growth", "kv-growth", plot=True)
                                recompute = gr.Button("Time this step without the cache (recompute the whole sequence)",
                                                      elem_id="kv-recompute-btn")
                                ViewSlot("kv_recompute", "kv-recompute-view")
                                build_kv_policy_panel(ctx)
                            with gr.Tab("Sampling", elem_id="tab-sampling") as tab_sampling:
                                gr.Markdown(vs.CAPTION, elem_classes="ii-caption")
                                ViewSlot("samp_fig", "sampling-bars", plot=True)
                                ViewSlot("samp_info", "sampling-view")
                                resample_btn = gr.Button("Resample this step's token", elem_id="resample-btn")
                            with gr.Tab("Tensor inventory", elem_id="tab-inventory") as tab_inventory:
                                gr.Markdown(" ".join([vi.CAPTION, precision_note(loaded.source_format or "", dtype)]),
                                            elem_classes="ii-caption")
                                inv_layer = gr.Dropdown(["none"] + [str(i) for i in range(cfg.num_hidden_layers)], value="none",
                                                        label="highlight layer", elem_id="inv-layer")
                                inventory = gr.HTML(h.inventory_view(None), elem_id="inventory")
                            with gr.Tab("Timing", elem_id="tab-timing") as tab_timing:
                                gr.Markdown(vt.CAPTION, elem_classes="ii-caption")
                                ViewSlot("timing_fig", "timing-chart", plot=True)
                                build_op_timing(h, sid)  # per operation: time a chosen step again, on the roofline
                            build_beams_tab(ctx, decoding)
                    with gr.Tab("Labs", elem_id="tab-labs"):
                        with gr.Tabs(overflow_behavior="wrap", elem_id="lab-tabs"):
                            for build_tab in LAB_TABS:
                                build_tab(ctx)
        ViewSlot("drawn", "views-drawn")  # hidden (app.css): which step the plots show (tests and bench wait on it)
        # Every view event has ONE output, the bundle of the views it changed (inspector.ui.bundle: Gradio's
        # cost per update grows with the number of outputs, skipped ones too).
        bundle = ViewBundle()
        sampling = [temperature, top_k, top_p, min_p, seed]
        hidden = {"api_visibility": "undocumented"}  # the script API is /prefill and /step (inspector.ui.api)

        prefill = bundled(h.prefill, VIEW_KEYS, lead=1)  # outputs: the session id, then the views
        # a new run starts with fresh selections unless pinned (inspector.ui.selections)
        fresh = {"fn": fresh_selections, "inputs": [pin], "outputs": [layer, head, position], "queue": False,
                 "show_progress": "hidden", **hidden}
        reselect = bundled(reselect_pinned(h.select, len(VIEW_KEYS)), VIEW_KEYS)
        for trigger, name in ((prefill_btn.click, "ui_prefill"), (prompt.submit, "ui_prefill_submit")):
            trigger(**fresh).then(prefill, [sid, prompt, chat, system, *sampling, max_new, layer, head], [sid, bundle],
                                  api_name=name, **hidden, **FAST).then(
                reselect, [sid, pin, position, layer, head], [bundle], **hidden, **FAST)
        # Step: one update (token, open tab's views, the hidden `drawn` marker), not queued (Handlers.step)
        step_btn.click(bundled(h.step, (*VIEW_KEYS, "drawn")), [sid, *sampling, layer, head], [bundle],
                       api_name="ui_step", queue=False, **hidden, show_progress="hidden")
        play_btn.click(bundled(h.play, VIEW_KEYS), [sid, *sampling, layer, head, speed, fastest], [bundle],
                       api_name="ui_play",
                       **hidden, **FAST)
        pause_btn.click(h.pause, [sid], None, api_name="ui_pause", queue=False, **hidden)
        reset_btn.click(bundled(h.reset, VIEW_KEYS), [sid, layer, head], [bundle], api_name="ui_reset", **hidden,
                        **FAST)
        resample_btn.click(bundled(h.resample, VIEW_KEYS), [sid, *sampling, layer, head], [bundle],
                           api_name="ui_resample", **hidden, **FAST)
        latest = {"trigger_mode": "always_last", **hidden}  # a burst of moves: only the last one is drawn
        # a sampling control moved: redraw the newest step's distribution from stored logits (no model). A
        # slider's `release` on leaving its number box can carry the value from before the typing (Gradio
        # dispatches it before the box's new value reaches the component's state); its `input` event, sent once
        # that state changed, comes after it, so the last drawn preview is always the one of the value shown.
        gr.on([temperature.release, top_k.release, top_p.release, min_p.release, temperature.input, top_k.input,
               top_p.input, min_p.input, seed.submit, seed.blur],
              bundled(h.preview, ("samp_fig", "samp_info", "status")), [sid, *sampling], [bundle], **latest, **FAST)
        gr.on([position.input, position.submit, layer.release, head.release], bundled(h.select, VIEW_KEYS),
              [sid, position, layer, head], [bundle], **latest, **FAST)
        branch_request.input(bundled(h.branch, VIEW_KEYS), [sid, branch_request, layer, head], [bundle],
                             api_name="ui_branch", **hidden, **FAST)
        branch_switch.input(bundled(h.switch, VIEW_KEYS), [sid, branch_switch, layer, head], [bundle],
                            api_name="ui_switch", **hidden, **FAST)
        recompute.click(bundled(h.recompute, ("kv_recompute", "status")), [sid], [bundle], **hidden, **FAST)
        inv_layer.change(h.inventory_view, [inv_layer], [inventory], **hidden, **FAST)
        wire_decoding_controls(decoding, store, sid)
        gr.on([chat.change, system.change], partial(system_note_html, system_info), [chat, system],
              [system_note], queue=False, show_progress="hidden", **hidden)
        build_tour_panel()  # the guided tour's floating card, open on a first visit (inspector.ui.tour_panel)
        for key, tab in [("residual", tab_residual), ("attention", tab_attention), ("kv", tab_kv),
                         ("sampling", tab_sampling), ("inventory", tab_inventory), ("timing", tab_timing)]:
            tab.select(bundled(h.show_tab(key), VIEW_KEYS), [sid, layer, head], [bundle], **latest, **FAST)
        # every page gets its session id at load, so Play pressed during the first prefill finds that prefill
        # trace files (inspector.ui.trace_io): save this run for download; open one and redraw every view
        save_trace_btn.click(bundled(partial(trace_io.export_trace_shown, h), ("status",), lead=1),
                             [sid, prompt, chat, system], [trace_file, bundle], **hidden, **FAST)
        open_trace_btn.upload(bundled(partial(trace_io.import_trace, h), VIEW_KEYS), [sid, open_trace_btn, layer, head],
                              [bundle], **hidden, **FAST)
        # "Link to this run": the server writes the query from the run the session holds (link_handlers), the
        # page puts its own address before it (static/app.js `inspectorRunLink`)
        link_btn.click(bundled(partial(link_handlers.link_query_for, h), ("status",), lead=1), [sid],
                       [link_query, bundle], **hidden, **FAST).then(
            lambda url: gr.update(value=url, visible=True) if url else gr.skip(), [link_query], [run_link],
            queue=False, js="(query) => window.inspectorRunLink(query)", **hidden)
        # a link with query parameters (inspector.ui.run_links) fills the controls, then runs prefill + steps
        link = gr.State(None)
        demo.load(bundled(h.page_load, VIEW_KEYS, lead=1), None, [sid, bundle], **hidden, **FAST).then(
            h.link_fill, None, [prompt, chat, system, *sampling, max_new, link], **hidden, **FAST).then(
            link_values, [link], decoding.inputs, **hidden, **FAST).then(
            bundled(h.link_run, VIEW_KEYS, lead=1), [sid, link, layer, head], [sid, bundle], **hidden, **FAST).then(
            None, None, None, js=PAGE_READY_JS)
        api.register(h, sid, [prompt, chat, system])
    return demo

