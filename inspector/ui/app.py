"""`build_app(loaded=None) -> gr.Blocks`: the Inference Inspector page — layout and wiring only.

The page is a header, the prompt bar with the run's buttons, the settings panel, the token column, then the
panels the registry lists (`inspector.ui.registry`) as tabs in two groups, Views and Labs: each panel lays out
its own tab and wires its own events (`inspector.ui.panel`). The run's events (Prefill, Step, Play, ...) are
`inspector.ui.handlers.Handlers`; every one has the view bundle as its output (`inspector.ui.bundle`): the
views it changed, by name. The browser's `gr.State` holds only a session id; the per-session state lives in
a `Visitors` and is freed when the State is deleted (time-to-live) or the page unloads. Theme, CSS and
JS go to `launch()` (Gradio 6): use `launch_kwargs()`; the queue: `queue_app(demo)`. Besides the views: branching
(`inspector.ui.branch_handlers`), links that reproduce a run (`inspector.ui.link_handlers`), trace files
(`inspector.ui.trace_io`).

Named API endpoints for scripts (gradio_client): `prefill` and `step`, each returning a dict with
`text`, `prompt_ids`, `generated_ids`, `pieces`, `phase`, `finished`, `ttft_ms`, `last_tpot_ms`.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import gradio as gr

from inspector.ui import branch_handlers, link_handlers, script_endpoints, trace_io
from inspector.ui.app_model import check_settings, load_app_model
from inspector.ui.bundle import ViewBundle, ViewSlot
from inspector.ui.decoding_controls import build_decoding_controls, link_values, wire_decoding_controls
from inspector.ui.fields import MAX_NEW, MIN_P, SEED, TEMPERATURE_UI, TOP_K_UI, TOP_P, FreeNumber, slider
from inspector.ui.handlers import Handlers
from inspector.ui.model_thread import call_prefill
from inspector.ui.page_head import STATIC, head_middleware, page_head
from inspector.ui.panel import NO_LOADING_STATUS, Page
from inspector.ui.play import build_speed_controls
from inspector.ui import registry
from inspector.ui.selections import build_pin
from inspector.viz.tokens import CHIP_START
from inspector.ui.visitors import Visitors, new_ui_session
from inspector.ui.system_prompt import chat_checkbox, system_note_html, template_system
from inspector.ui.tour_panel import TOUR_CSS_FILE, build_tour_button, build_tour_panel
from inspector.viz import tokens as vtok
from inspector.viz.header import model_header_html
from inspector.viz.precision import precision_note


EXAMPLES = [
    ["What is gravity?", True],
    ["The capital of France is", False],
    ["Write a haiku about the sea.", True],
    ["def fibonacci(n):", False],
]
# The last link of the page-load chain marks the page: until then a load step may still write the controls
# (a run link's values), so browser tests and scripts wait for `body[data-inspector-loaded]`.
PAGE_READY_JS = "() => { document.body.dataset.inspectorLoaded = '1'; }"
HIDDEN = {"api_visibility": "undocumented"}  # the script API is /prefill and /step (inspector.ui.script_endpoints)


def launch_kwargs() -> dict[str, Any]:
    """theme / css / js for `demo.launch(...)` (Gradio 6 takes them there, not in Blocks), and the page's head
    scripts (`inspector.ui.page_head`) twice: first in the page's HTML through the middleware, where they run
    before Gradio's modules, and as Gradio's `head`, which its frontend adds once the app has loaded. The second
    reaches a page whose HTML does not come through this server's middleware (with server-side rendering, Node
    serves it): there queue_stream.js comes as Gradio's head always brought it, and loading_timer.js comes too
    late to do anything. Each script runs once on a page (a second copy finds the first and returns)."""
    return {
        "theme": gr.themes.Default(primary_hue="indigo"),  # LocalFont only: no Google Fonts request
        "css": (STATIC / "app.css").read_text(encoding="utf-8") + TOUR_CSS_FILE.read_text(encoding="utf-8"),
        "js": (STATIC / "app.js").read_text(encoding="utf-8"),
        "head": page_head(),
        "app_kwargs": {"middleware": [head_middleware()]},
    }


# Gradio's queue rebuilds a monitoring summary after every event it ends: a pandas DataFrame of every event it has
# recorded (up to 10,000), grouped by function. With this page's 79 event handlers, one rebuild took 4 ms of the
# server's CPU after 50 events, 14 ms after 2,000 and 19 ms after 10,000 (2-core machine), on cores the model
# shares. Only Gradio's /monitoring/summary route reads it; rebuilt once every MONITORING_SUMMARY_EVERY events it
# costs a hundredth of that per event, and that route's figures lag by up to as many events. Gradio reads the
# count from GRADIO_ANALYTICS_CACHE_FREQUENCY when the queue is made; a value set in the environment wins.
MONITORING_SUMMARY_EVERY = 100
# While it has no event, Gradio's queue looks for one every millisecond (`Queue.sleep_when_free`, 1 ms on Linux):
# an idle server used 0.034 core for it (0.013-0.021 at 10 ms, 2-core machine), and the wake-ups slowed a decode
# at 2 torch threads in the same process by 10-16% (a wake-up can take a core from one of its lock-step OpenMP
# threads).
# At IDLE_POLL_S an event that arrives while the queue is idle starts at most that long after it came.
IDLE_POLL_S = 0.01


def queue_app(demo: gr.Blocks) -> None:
    """Put the app on Gradio's queue as `python app.py` and the in-process servers do: no concurrency cap (model
    work keeps its own order on the model threads, `inspector.ui.model_thread`), Gradio's monitoring summary
    rebuilt once every MONITORING_SUMMARY_EVERY events instead of after each, and an idle queue polled every
    IDLE_POLL_S."""
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(MONITORING_SUMMARY_EVERY))
    demo.queue(default_concurrency_limit=None)
    if hasattr(demo._queue, "sleep_when_free"):  # read on each turn of the queue's loop
        demo._queue.sleep_when_free = IDLE_POLL_S


def build_app(loaded: Any = None) -> gr.Blocks:
    """The whole page over one loaded model (loaded here when not given)."""
    limits = check_settings()  # the INSPECTOR_* settings are checked before the model loads (a first start converts it)
    if loaded is None:
        # loaded on the prefill thread: the thread that loads starts a torch thread team (the weight copies run in
        # parallel), and a team left on this thread, which then serves the page, would outnumber the cores beside
        # the model threads' (inspector.ui.model_thread)
        loaded = call_prefill(load_app_model)
    store = Visitors(lambda: new_ui_session(loaded), limits)  # the caps live here (`Page.limits`)
    page = Page(loaded, store)
    registry.build_panels(page)
    h = page.handlers = Handlers(page)

    with gr.Blocks(title="Inference Inspector") as demo:
        demo.store = store  # tests and bench look at live sessions and the caps (`store.limits`)
        demo.handlers = h  # bench/page.py drives Play through them with no browser
        # The callback must be a plain function, never `store.drop`: Gradio deep-copies the page config on
        # every GET /config (each page load, each gradio_client), and a bound method would copy the store
        # through it: every live session and the model's weights (deepcopy keeps functions as they are).
        page.sid = gr.State(None, time_to_live=limits.session_ttl_s, delete_callback=lambda sid: store.drop(sid))
        inv = page.inventory
        gr.HTML(model_header_html(loaded.name, inv.params, page.dtype_name, loaded.config, inv.bytes,
                                  loaded.source_format, loaded.source_bytes,
                                  precision_note(loaded.source_format or "", page.dtype_name, loaded.source_types)))
        buttons = prompt_bar(page)
        with gr.Accordion("Sampling, system prompt, example prompts", open=False, elem_id="settings"):
            settings_panel(page)
        with gr.Row(equal_height=False, elem_id="workspace"):
            with gr.Column(scale=2, min_width=280, elem_id="token-column"):
                run_controls = token_column()
            with gr.Column(scale=5, min_width=320, elem_id="view-column"):
                ViewSlot("pipeline", "pipeline")  # the stages of the newest step, along the top of the views
                tabs = panel_tabs(page)
        ViewSlot("drawn", "views-drawn")  # hidden (app.css): which step the plots show (tests and bench wait on it)
        h.bundle = ViewBundle()  # the one output of every run event (inspector.ui.bundle)
        for panel in page.panels.values():
            panel.wire()
        wire_run(demo, page, buttons, run_controls, tabs)
        build_tour_panel()  # the guided tour's floating card, open on a first visit (inspector.ui.tour_panel)
        script_endpoints.register(h, page.sid, [page.prompt, page.chat, page.system])
    return demo


def prompt_bar(page: Page) -> dict[str, Any]:
    """The prompt, the run's buttons and the run's options (chat template, max new tokens, Play's speed).
    First screen (1400x900): a prompt bar with the run buttons, settings folded away, then the tokens beside
    the views, so after Prefill the tokens and the open view's main plot are both in sight."""
    b: dict[str, Any] = {}
    with gr.Row(equal_height=False, elem_id="prompt-bar"):
        page.prompt = gr.Textbox(label="Prompt", lines=2, max_lines=6, elem_id="prompt", scale=5, min_width=260,
                                 placeholder="Type a prompt, then Prefill (→ steps, space plays/pauses)")
        with gr.Column(scale=4, min_width=300, elem_id="run-controls"):
            with gr.Row(elem_classes="ii-buttons"):
                b["prefill"] = gr.Button("Prefill", variant="primary", elem_id="prefill-btn", size="sm")
                b["step"] = gr.Button("Step →", elem_id="step-btn", size="sm")
                b["play"] = gr.Button("Play ▶", elem_id="play-btn", size="sm")
                b["pause"] = gr.Button("Pause", elem_id="pause-btn", size="sm")
                b["reset"] = gr.Button("Reset", variant="stop", elem_id="reset-btn", size="sm")
                build_tour_button()  # reopens the guided tour (static/tour.js)
                b["link"] = gr.Button("Link to this run", elem_id="link-btn", size="sm", min_width=110)
            with gr.Row(elem_classes="ii-options"):
                page.chat = chat_checkbox(page.loaded.tokenizer)  # unticked and disabled without a template
                page.max_new = FreeNumber(32, label=MAX_NEW.name, precision=0, elem_id="max-new-tokens", min_width=110)
                b["speed"], b["fastest"] = build_speed_controls()  # Play's pace (inspector.ui.play)
    return b


def settings_panel(page: Page) -> None:
    """Sampling controls, seed, system prompt (with the note saying which applies), decoding, examples."""
    with gr.Row():
        temperature = slider(TEMPERATURE_UI, 0.0, 0.05, "temperature (0 = greedy)", "temperature")
        top_k = slider(TOP_K_UI, 0, 1, "top-k (0 = off)", "top-k")
        top_p = slider(TOP_P, 1.0, 0.01, "top-p", "top-p")
        min_p = slider(MIN_P, 0.0, 0.01, "min-p", "min-p")
    with gr.Row():
        seed = FreeNumber(0, label=SEED.name, precision=0, elem_id="seed", min_width=100)
        page.system_info = template_system(page.loaded.tokenizer)
        page.system = gr.Textbox(label="System prompt (chat only, optional)", lines=1, elem_id="system-prompt",
                                 scale=4, placeholder=page.system_info.default or "")
    page.sampling = (temperature, top_k, top_p, min_p, seed)
    page.system_note = gr.HTML(system_note_html(page.system_info, page.chat.value, ""), elem_id="system-note-view")
    page.decoding = build_decoding_controls()  # penalties, bans, stop, constraint, beams (Sampling view stages)
    chat_ok = bool(page.chat.interactive is not False)  # a model without a chat template reads plain prompts
    gr.Examples([[text, chat and chat_ok] for text, chat in EXAMPLES], inputs=[page.prompt, page.chat],
                label="Example prompts")


def token_column() -> dict[str, Any]:
    """Status, tokens, text, the branch tree, trace files, the run link and the page's hidden request boxes."""
    c: dict[str, Any] = {}
    ViewSlot("status", "status")
    gr.Markdown(vtok.CAPTION, elem_classes="ii-caption")
    ViewSlot("chips", "tokens", items=CHIP_START)  # a list of chips: a Step changes one or two, only those are redrawn
    ViewSlot("text", "text")
    ViewSlot("branches", "branches")  # the branch tree, once the run has branched
    with gr.Row(elem_classes="ii-trace-row"):
        c["save_trace"] = gr.Button("Save trace", elem_id="trace-save-btn", size="sm", min_width=90)
        c["open_trace"] = gr.UploadButton("Open trace", elem_id="trace-open-btn", size="sm", min_width=90,
                                          file_types=[".safetensors"], file_count="single")
    c["trace_file"] = gr.File(label="trace file (safetensors: reopen it with Open trace, or `inspector trace`)",
                              elem_id="trace-file", visible=False, interactive=False)
    c["run_link"] = gr.Textbox(label="link to this run (opening it runs the same prompt, settings, steps and branches)",
                               elem_id="run-link", interactive=False, buttons=["copy"], visible=False)
    c["link_query"] = gr.Textbox(elem_id="link-query", elem_classes="ii-offscreen", container=False)
    # what static/app.js sends for a click on a "what if" candidate ("step:token id") or a branch
    c["branch_request"] = gr.Textbox(elem_id="branch-request", elem_classes="ii-offscreen", container=False)
    c["branch_switch"] = gr.Textbox(elem_id="branch-switch", elem_classes="ii-offscreen", container=False)
    # the order of a view tab's opening, counted by the page (TAB_OPENED_JS): never drawn, only sent
    c["tab_order"] = gr.Number(0, precision=0, visible=False)
    c["position"] = FreeNumber(-1, label="selected position (click a token; -1 = newest)", precision=0,
                               elem_id="position")
    c["pin"] = build_pin()  # keep layer / head / position across runs (inspector.ui.selections)
    return c


def panel_tabs(page: Page) -> dict[str, Any]:
    """Every panel of the registry that applies to the page's model in its tab: two groups, each a tab row
    that wraps (never Gradio's overflow menu: every label is in sight at 1280 px and on a 390 px phone).
    static/app.js `openTab` opens a label's group first. Returns the view tabs by key (opening one draws its
    views)."""
    tabs: dict[str, Any] = {}
    with gr.Tabs(elem_id="tab-groups"):
        groups = (("Views", "tab-views", registry.page_views()), ("Labs", "tab-labs", registry.LABS))
        for group, elem_id, panels in groups:
            with gr.Tab(group, elem_id=elem_id):
                with gr.Tabs(overflow_behavior="wrap", elem_id=f"{elem_id[4:-1]}-tabs"):
                    for cls in panels:
                        if cls.key not in page.panels:
                            continue  # not for this model (`Panel.applies`)
                        panel = page.panels[cls.key]
                        with gr.Tab(panel.title, elem_id=panel.tab_id) as panel.tab:
                            panel.layout()
                        tabs[panel.key] = panel.tab
    return tabs


# A view tab opened: the page counts its openings and sends the count with each, so the server keeps the newest
# opening's tab when Gradio runs two openings' handlers in the other order (`Visitor.open_tab`).
TAB_OPENED_JS = "(sid, layer, head, order) => [sid, layer, head, (window.iiTabOrder = (window.iiTabOrder || 0) + 1)]"


def wire_run(demo: gr.Blocks, page: Page, b: dict[str, Any], c: dict[str, Any], tabs: dict[str, Any]) -> None:
    """The run's events: every one outputs the view bundle (the views it changed)."""
    h = page.handlers
    sid, layer, head, position = page.sid, page.layer, page.head, c["position"]
    sampling = list(page.sampling)
    fast = {**NO_LOADING_STATUS, "concurrency_limit": None}
    # Prefill asked: the status says it is coming and a Step or Play pressed before it runs waits for it; a new
    # run starts with fresh selections unless pinned (inspector.ui.selections). Not queued: it answers at once.
    # The prefill then draws the new run, with the pinned position selected when "pin" is ticked (one event).
    prefill_inputs = [sid, page.prompt, page.chat, page.system, *sampling, page.max_new, layer, head, c["pin"],
                      position]
    for trigger, name in ((b["prefill"].click, "ui_prefill"), (page.prompt.submit, "ui_prefill_submit")):
        asked = h.on(trigger, h.ask_prefill, [sid, c["pin"]], lead=[layer, head, position], queue=False,
                     api_name=f"{name}_asked")
        # always_last: a Prefill pressed while the last prefill is pending runs once it is done (Gradio's default,
        # "once", would drop it after its ask told the server a prefill was coming)
        h.on(asked.then, h.prefill, prefill_inputs, lead=[sid], api_name=name, trigger_mode="always_last")
    # Step: one update (token, open tab's views, the hidden `drawn` marker), not queued (Handlers.step)
    h.on(b["step"].click, h.step, [sid, *sampling, layer, head], api_name="ui_step", queue=False)
    h.on(b["play"].click, h.play, [sid, *sampling, layer, head, b["speed"], b["fastest"]], api_name="ui_play")
    b["pause"].click(h.pause, [sid], None, api_name="ui_pause", queue=False, **HIDDEN)
    h.on(b["reset"].click, h.reset, [sid, layer, head], api_name="ui_reset")
    latest = {"trigger_mode": "always_last"}  # a burst of moves: only the last one is drawn
    # a sampling control moved: redraw the newest step's distribution from stored logits (no model). A
    # slider's `release` on leaving its number box can carry the value from before the typing (Gradio
    # dispatches it before the box's new value reaches the component's state); its `input` event, sent once
    # that state changed, comes after it, so the last drawn preview is always the one of the value shown.
    temperature, top_k, top_p, min_p, seed = page.sampling
    h.on([temperature.release, top_k.release, top_p.release, min_p.release, temperature.input, top_k.input,
          top_p.input, min_p.input, seed.submit, seed.blur], h.preview, [sid, *sampling], **latest)
    h.on([position.input, position.submit, layer.release, head.release], h.select, [sid, position, layer, head],
         **latest)
    h.on(c["branch_request"].input, partial(branch_handlers.branch, h), [sid, c["branch_request"], layer, head],
         api_name="ui_branch")
    h.on(c["branch_switch"].input, partial(branch_handlers.switch, h), [sid, c["branch_switch"], layer, head],
         api_name="ui_switch")
    wire_decoding_controls(page.decoding, page.store, sid)
    gr.on([page.chat.change, page.system.change], partial(system_note_html, page.system_info), [page.chat, page.system],
          [page.system_note], queue=False, **NO_LOADING_STATUS, **HIDDEN)
    for key, tab in tabs.items():
        if key in h.render.views_by_tab:
            h.on(tab.select, h.show_tab(key), [sid, layer, head, c["tab_order"]], js=TAB_OPENED_JS, **latest)
    # trace files (inspector.ui.trace_io): save this run for download; open one and redraw every view
    h.on(c["save_trace"].click, partial(trace_io.export_trace_shown, h), [sid, page.prompt, page.chat, page.system],
         lead=[c["trace_file"]])
    h.on(c["open_trace"].upload, partial(trace_io.import_trace, h), [sid, c["open_trace"], layer, head])
    # "Link to this run": the server writes the query from the run the session holds (link_handlers), the
    # page puts its own address before it (static/app.js `inspectorRunLink`)
    link = h.on(b["link"].click, partial(link_handlers.link_query_for, h), [sid], lead=[c["link_query"]])
    link.then(lambda url: gr.update(value=url, visible=True) if url else gr.skip(), [c["link_query"]], [c["run_link"]],
              queue=False, js="(query) => window.inspectorRunLink(query)", **NO_LOADING_STATUS, **HIDDEN)
    # every page gets its session id at load, so Play pressed during the first prefill finds that prefill; a
    # link with query parameters (inspector.ui.run_links) fills the controls, then runs prefill + steps
    state = gr.State(None)
    loaded = h.on(demo.load, h.page_load, None, lead=[sid])
    filled = loaded.then(link_handlers.link_fill, None, [page.prompt, page.chat, page.system, *sampling, page.max_new,
                                                          state], **HIDDEN, **fast)
    values = filled.then(link_values, [state], page.decoding.inputs, **HIDDEN, **fast)
    ran = h.on(values.then, partial(link_handlers.link_run, h), [sid, state, layer, head], lead=[sid])
    ran.then(None, None, None, js=PAGE_READY_JS)
