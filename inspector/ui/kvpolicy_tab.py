"""The KV-cache policy lab tab: generate under a policy and watch what the cache keeps, beside the full cache.

`build_kvpolicy_tab(ctx)` lays out the policy (full / window / sinks / h2o / snapkv / int8 / int4), the
budget (positions each layer and KV head keeps), the sink count, Run, and a layer and KV head selector;
below them the views of `inspector.viz.kv_policies`: the texts with and without the policy, mean KL, top-1
agreement and the bytes saved; the positions x steps map of the chosen layer and KV head (kept, colored by
why: sink, recent, heavy hitter, SnapKV vote; evicted in grey; the hover gives H2O's accumulated score);
per generated token the KL against the full cache on the same context, red where the top-1 differs.
Below, "FlashAttention tiles": one query head of the prompt's prefill through tiled attention
(`inspector.quant.flash_walk`), a tile selector redrawing the tile read and m, l per query row.

Run uses the page's prompt, chat toggle, system prompt and max new tokens (caps first: `admit_prompt`,
`admit_max_new`, the context window) and runs `inspector.quant.kv_watch.watch_policy` on the decode thread
under the entry's lock (greedy; the full cache runs alongside on the same tokens). The browser's lab state
keeps the last `KVPolicyRun`; the layer and head selectors redraw from it without model work. Bad input is
one line in the tab's status; handlers never raise.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.quant.flash_walk import flash_walk
from inspector.quant.kv_eval import ALL_POLICIES, CacheSpec
from inspector.quant.kv_watch import watch_policy
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_prompt
from inspector.ui.fields import KV_BUDGET, KV_SINKS, FreeNumber, head_bound, layer_bound, slider
from inspector.ui.tab_context import TabContext, lab_state
from inspector.validate import Bound
from inspector.viz import kv_policies as vk
from inspector.viz.common import empty_figure, status_line_html

LAB = "kvpolicy"
BUDGET, SINKS = KV_BUDGET, KV_SINKS
OVERFLOW = {"stop (context full)": "stop", "continue with a sliding window": "window"}


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "kvpolicy-status-line")


def spec_of(policy: Any, budget: Any, sinks: Any) -> CacheSpec:
    """The chosen policy as a checked `CacheSpec`; InputError naming what is allowed."""
    if policy not in ALL_POLICIES:
        raise InputError(f"unknown policy {str(policy)[:40]!r}: the policies are {', '.join(ALL_POLICIES)}")
    if policy in ("full", "int8", "int4"):
        return CacheSpec(str(policy))
    spec = CacheSpec(str(policy), int(BUDGET.parse(budget)), int(SINKS.parse(sinks)) if policy == "sinks" else 4)
    spec.check()
    return spec


def views(state: dict, message: str, error: bool = False) -> tuple:
    """(status, summary, map, metrics) from the kept run (placeholders before one)."""
    run = state.get("run")
    if run is None:
        return (status_html(message, error), "", empty_figure("The kept-positions map appears after a run"),
                empty_figure("Per-step KL against the full cache appears after a run"))
    return (status_html(message, error), vk.summary_html(run), vk.kept_map_figure(run, state["layer"], state["head"]),
            vk.step_metrics_figure(run))


def run_policy(ctx: TabContext, sid: str | None, policy: Any, budget: Any, sinks: Any, layer: Any, head: Any,
               prompt: Any, chat: Any, system: Any, max_new: Any, on_context_full: Any = "stop") -> tuple:
    """The Run button: caps first, then the generation under the policy with the full cache alongside."""
    state: dict = {}
    try:
        spec = spec_of(policy, budget, sinks)
        n = admit_max_new(max_new, ctx.limits)
        admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)
        overflow = OVERFLOW.get(on_context_full, on_context_full)
        if overflow not in OVERFLOW.values():
            raise InputError(f"when the context is full: choose {' or '.join(OVERFLOW)}, got {str(on_context_full)[:40]!r}")
        entry, state = lab_state(ctx, sid, LAB)
        tok = ctx.loaded.tokenizer
        with entry.exclusive(LAB):
            run = model_thread.run(watch_policy, ctx.loaded.model, admitted.ids, n, spec, tok.piece, tok.decode,
                                   ctx.loaded.stop_ids, overflow)
        state.update(run=run, layer=0, head=0)
        state["layer"], state["head"] = _layer_head(ctx, layer, head)
        return views(state, f"{run.label}: {len(run.steps)} tokens generated with the full cache alongside "
                            f"(finished: {run.finish})")
    except InputError as exc:
        return views(state, str(exc), error=True)


def kv_head_bound(config: Any) -> Bound:
    return Bound("KV head", True, 0, config.num_key_value_heads - 1)


def _layer_head(ctx: TabContext, layer: Any, head: Any) -> tuple[int, int]:
    cfg = ctx.loaded.config
    return int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))


def select(ctx: TabContext, sid: str | None, layer: Any, head: Any) -> tuple:
    """The layer / KV head selectors: redraw the map from the kept run (no model work)."""
    try:
        entry = ctx.store.get(sid)
        state = entry.labs.get(LAB) if entry is not None else None
        if not state or state.get("run") is None:
            raise InputError("nothing to show yet: press Run first")
        state["layer"], state["head"] = _layer_head(ctx, layer, head)
        return (status_html(f"layer {state['layer']}, KV head {state['head']}"),
                vk.kept_map_figure(state["run"], state["layer"], state["head"]))
    except InputError as exc:
        return status_html(str(exc), error=True), gr.skip()


def run_flash(ctx: TabContext, sid: str | None, layer: Any, head: Any, prompt: Any, chat: Any, system: Any) -> tuple:
    """The tiles button: the prompt's prefill, then one head through tiled attention; (status, text, tile, state)."""
    try:
        cfg = ctx.loaded.config
        lv, hv = int(layer_bound(cfg).parse(layer)), int(head_bound(cfg).parse(head))
        admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)
        entry, state = lab_state(ctx, sid, LAB)
        with entry.exclusive(LAB):
            walk = model_thread.run(flash_walk, ctx.loaded.model, admitted.ids, lv, hv, ctx.loaded.tokenizer.piece)
        state.update(flash=walk)
        return (status_html(f"layer {lv}, head {hv}: {len(walk.tiles)} tiles"), vk.flash_html(walk),
                vk.flash_tile_figure(walk, 0), vk.flash_state_figure(walk, 0),
                gr.update(maximum=max(len(walk.tiles), 2), value=1))
    except InputError as exc:
        return status_html(str(exc), error=True), gr.skip(), gr.skip(), gr.skip(), gr.skip()


def select_tile(ctx: TabContext, sid: str | None, tile: Any) -> tuple:
    """The tile selector (1-based): redraw from the kept walk (no model work)."""
    try:
        entry = ctx.store.get(sid)
        state = entry.labs.get(LAB) if entry is not None else None
        if not state or state.get("flash") is None:
            raise InputError("nothing to show yet: press Step through tiles first")
        walk = state["flash"]
        i = int(Bound("tile", True, 1, len(walk.tiles)).parse(tile)) - 1
        return status_html(f"tile {i + 1}"), vk.flash_tile_figure(walk, i), vk.flash_state_figure(walk, i)
    except InputError as exc:
        return status_html(str(exc), error=True), gr.skip(), gr.skip()


def policy_controls(policies: tuple[str, ...], prefix: str) -> tuple:
    """(policy, budget, sinks) components, laid out where called; element ids `<prefix>-policy` and so on."""
    policy = gr.Dropdown(list(policies), value="h2o", label="policy", elem_id=f"{prefix}-policy")
    budget = FreeNumber(32, precision=0, label="budget (positions kept per layer and KV head)",
                        elem_id=f"{prefix}-budget")
    sinks = FreeNumber(4, precision=0, label="sinks (policy sinks)", elem_id=f"{prefix}-sinks")
    return policy, budget, sinks


def run_views(blank: tuple, prefix: str, cfg: Any) -> tuple:
    """(status, summary, layer, head, map, metrics) components of a policy run, filled with `blank`."""
    status = gr.HTML(blank[0], elem_id=f"{prefix}-status")
    summary = gr.HTML(blank[1], elem_id=f"{prefix}-summary")
    with gr.Row():
        layer = slider(layer_bound(cfg), 0, 1, "layer", f"{prefix}-layer")
        head = slider(kv_head_bound(cfg), 0, 1, "KV head", f"{prefix}-head")
    kept = gr.Plot(blank[2], elem_id=f"{prefix}-map", show_label=False)
    metrics = gr.Plot(blank[3], elem_id=f"{prefix}-metrics", show_label=False)
    return status, summary, layer, head, kept, metrics


def build_kvpolicy_tab(ctx: TabContext) -> None:
    fast = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
    cfg = ctx.loaded.config
    with gr.Tab("KV policies", elem_id="tab-kvpolicy"):
        gr.Markdown(vk.CAPTION + " Uses the page's prompt, chat toggle and max new tokens; greedy, in a run of its "
                    "own (the KV cache view runs the page's own generation under an eviction policy; here the int8 "
                    "and int4 caches and the context-overflow choice too).",
                    elem_classes="ii-caption")
        with gr.Row():
            policy, budget, sinks = policy_controls(ALL_POLICIES, "kvpolicy")
            overflow = gr.Radio(list(OVERFLOW), value="stop (context full)", label="when the context is full",
                                elem_id="kvpolicy-overflow")
            run_btn = gr.Button("Run", variant="primary", elem_id="kvpolicy-run")
        blank = views({}, "choose a policy and a budget, then Run")
        status, summary, layer, head, kept, metrics = run_views(blank, "kvpolicy", cfg)
        with gr.Accordion("FlashAttention tiles: one head of the prompt's prefill", open=False):
            with gr.Row():
                f_layer = slider(layer_bound(cfg), 0, 1, "layer", "kvpolicy-flash-layer")
                f_head = slider(head_bound(cfg), 0, 1, "query head", "kvpolicy-flash-head")
                f_btn = gr.Button("Step through tiles", elem_id="kvpolicy-flash-run")
            f_text = gr.HTML("", elem_id="kvpolicy-flash-summary")
            f_tile = slider(Bound("tile", True, 1, 2), 1, 1, "tile", "kvpolicy-flash-tile")
            with gr.Row():
                f_tile_fig = gr.Plot(empty_figure("The tile being read appears here"), elem_id="kvpolicy-flash-tile-fig",
                                     show_label=False)
                f_state = gr.Plot(empty_figure("m, l and the output's move per query row"),
                                  elem_id="kvpolicy-flash-state", show_label=False)

    run_btn.click(lambda sid, *a: run_policy(ctx, sid, *a),
                  [ctx.sid, policy, budget, sinks, layer, head, ctx.prompt, ctx.chat, ctx.system, ctx.max_new, overflow],
                  [status, summary, kept, metrics], **fast)
    f_btn.click(lambda sid, *a: run_flash(ctx, sid, *a), [ctx.sid, f_layer, f_head, ctx.prompt, ctx.chat, ctx.system],
                [status, f_text, f_tile_fig, f_state, f_tile], **fast)
    f_tile.release(lambda sid, t: select_tile(ctx, sid, t), [ctx.sid, f_tile], [status, f_tile_fig, f_state],
                   trigger_mode="always_last", **fast)
    for selector in (layer, head):
        selector.release(lambda sid, lv, hv: select(ctx, sid, lv, hv), [ctx.sid, layer, head], [status, kept],
                       trigger_mode="always_last", **fast)
