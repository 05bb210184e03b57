"""The KV policies lab: generate under a KV-cache policy and watch what the cache keeps, beside the full cache.

The tab lays out the policy (full / window / sinks / h2o / snapkv / int8 / int4), the budget (positions each
layer and KV head keeps), the sink count, what happens when the context is full, Run, and a layer and KV
head selector; below them the views of `inspector.viz.kv_policies`: the texts with and without the policy,
mean KL, top-1 agreement and the bytes a compacting cache would save; the positions x steps map of the
chosen layer and KV head (kept, colored by why: sink, recent, heavy hitter, SnapKV vote; evicted in grey;
the hover gives H2O's accumulated score); per generated token the KL against the full cache on the same
context, red where the top-1 differs. Below, "FlashAttention tiles": one query head of the prompt's
prefill through tiled attention (`inspector.quant.flash_walk`), a tile selector redrawing the tile read
and m, l per query row.

Run uses the page's prompt, chat toggle, system prompt and max new tokens (caps first: `admit_prompt`,
`admit_max_new`, the context window) and runs `inspector.quant.kv_watch.watch_policy` on the decode thread
under the visitor's lock (greedy; the full cache runs alongside on the same tokens). The state keeps the last
`KVPolicyRun` and `FlashWalk`; the selectors redraw from them without model work. The helpers `spec_of`,
`kv_head_bound`, `policy_controls`, `run_views` and `policy_views` serve the KV cache view's policy section
too (`inspector.ui.views.kv_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.quant.flash_walk import flash_walk
from inspector.quant.kv_eval import ALL_POLICIES, CacheSpec
from inspector.quant.kv_watch import watch_policy
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_prompt
from inspector.ui.fields import KV_BUDGET, KV_SINKS, FreeNumber, head_bound, kv_head_bound, layer_bound, slider, \
    tile_bound
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.viz import kv_policies as vk
from inspector.viz.common import empty_figure

OVERFLOW = {"stop (context full)": "stop", "continue with a sliding window": "window"}

__all__ = ["KVPoliciesLab", "kv_head_bound", "policy_controls", "policy_views", "run_views", "spec_of"]


def spec_of(policy: Any, budget: Any, sinks: Any) -> CacheSpec:
    """The chosen policy as a checked `CacheSpec`; InputError naming what is allowed."""
    if policy not in ALL_POLICIES:
        raise InputError(f"unknown policy {str(policy)[:40]!r}: the policies are {', '.join(ALL_POLICIES)}")
    if policy in ("full", "int8", "int4"):
        return CacheSpec(str(policy))
    spec = CacheSpec(str(policy), int(KV_BUDGET.parse(budget)), int(KV_SINKS.parse(sinks)) if policy == "sinks" else 4)
    spec.check()
    return spec


def policy_views(run: Any, layer: int, head: int, summary_id: str, after: str = "a run",
                 metric: str = "Per-step KL") -> dict[str, Any]:
    """{summary, map, metrics} of a kept policy run (placeholders before one, naming what fills them)."""
    if run is None:
        return {"summary": "", "map": empty_figure(f"The kept-positions map appears after {after}"),
                "metrics": empty_figure(f"{metric} against the full cache appears after {after}")}
    return {"summary": vk.summary_html(run, summary_id), "map": vk.kept_map_figure(run, layer, head),
            "metrics": vk.step_metrics_figure(run)}


def policy_controls(policies: tuple[str, ...], prefix: str) -> tuple:
    """(policy, budget, sinks) components, laid out where called; element ids `<prefix>-policy` and so on."""
    import gradio as gr

    policy = gr.Dropdown(list(policies), value="h2o", label="policy", elem_id=f"{prefix}-policy")
    budget = FreeNumber(32, precision=0, label="budget (positions kept per layer and KV head; SnapKV: of the prompt)",
                        elem_id=f"{prefix}-budget")
    sinks = FreeNumber(4, precision=0, label="sinks (policy sinks)", elem_id=f"{prefix}-sinks")
    return policy, budget, sinks


def run_views(panel: Panel, blank: dict[str, Any], prefix: str, cfg: Any) -> tuple:
    """Lay out a policy run's outputs for `panel` (status, summary, map, metrics, filled with `blank`);
    returns its (layer, KV head) selectors."""
    import gradio as gr

    panel.show("status", gr.HTML(blank["status"], elem_id=f"{prefix}-status"))
    panel.show("summary", gr.HTML(blank["summary"], elem_id=f"{prefix}-summary"))
    with gr.Row():
        layer = slider(layer_bound(cfg), 0, 1, "layer", f"{prefix}-layer")
        head = slider(kv_head_bound(cfg), 0, 1, "KV head", f"{prefix}-head")
    panel.show("map", Figure(blank["map"], elem_id=f"{prefix}-map", show_label=False))
    panel.show("metrics", Figure(blank["metrics"], elem_id=f"{prefix}-metrics", show_label=False))
    return layer, head


@dataclass
class KVPoliciesState(PanelState):
    run: Any = None  # inspector.quant.measurements.KVPolicyRun
    layer: int = 0
    head: int = 0
    flash: Any = None  # inspector.quant.measurements.FlashWalk


class KVPoliciesLab(Panel):
    key, title, tab_id = "kvpolicy", "KV policies", "tab-kvpolicy"
    status_id = "kvpolicy-status-line"
    State = KVPoliciesState

    def layout(self) -> None:
        import gradio as gr

        cfg = self.page.loaded.config
        gr.Markdown(vk.CAPTION + " Uses the page's prompt, chat toggle and max new tokens; greedy, in a run of its "
                    "own (the KV cache view runs the page's own generation under an eviction policy; here the int8 "
                    "and int4 caches and the context-overflow choice too). Continuing with a sliding window keeps the "
                    "first positions (attention sinks) and the newest, each at its original position, so positions "
                    f"count on past the model's context of {cfg.max_position_embeddings:,} (max_position_embeddings): "
                    "RoPE angles it never saw in training.", elem_classes="ii-caption")
        with gr.Row():
            self.policy, self.budget, self.sinks = policy_controls(ALL_POLICIES, "kvpolicy")
            self.overflow = gr.Radio(list(OVERFLOW), value="stop (context full)", label="when the context is full",
                                     elem_id="kvpolicy-overflow")
            self.run_btn = gr.Button("Run", variant="primary", elem_id="kvpolicy-run")
        blank = {"status": self.status("choose a policy and a budget, then Run"),
                 **policy_views(None, 0, 0, "kvpolicy-summary-text")}
        self.layer, self.head = run_views(self, blank, "kvpolicy", cfg)
        with gr.Accordion("FlashAttention tiles: one head of the prompt's prefill", open=False):
            with gr.Row():
                self.f_layer = slider(layer_bound(cfg), 0, 1, "layer", "kvpolicy-flash-layer")
                self.f_head = slider(head_bound(cfg), 0, 1, "query head", "kvpolicy-flash-head")
                self.f_btn = gr.Button("Step through tiles", elem_id="kvpolicy-flash-run")
            self.show("flash_text", gr.HTML("", elem_id="kvpolicy-flash-summary"))
            self.show("tile", slider(tile_bound(2), 1, 1, "tile", "kvpolicy-flash-tile"))
            with gr.Row():
                self.show("flash_tile", Figure(empty_figure("The tile being read appears here"),
                                               elem_id="kvpolicy-flash-tile-fig", show_label=False))
                self.show("flash_state", Figure(empty_figure("m, l and the output's move per query row"),
                                                elem_id="kvpolicy-flash-state", show_label=False))

    def wire(self) -> None:
        p = self.page
        self.on(self.run_btn.click, self.run_policy, [p.sid, self.policy, self.budget, self.sinks, self.layer,
                                                      self.head, p.prompt, p.chat, p.system, p.max_new, self.overflow],
                ["status", "summary", "map", "metrics"])
        self.on(self.f_btn.click, self.run_flash, [p.sid, self.f_layer, self.f_head, p.prompt, p.chat, p.system],
                ["status", "flash_text", "flash_tile", "flash_state", "tile"])
        self.on(self.outputs["tile"].release, self.select_tile, [p.sid, self.outputs["tile"]],
                ["status", "flash_tile", "flash_state"], trigger_mode="always_last")
        self.on([self.layer.release, self.head.release], self.select, [p.sid, self.layer, self.head],
                ["status", "map"], trigger_mode="always_last")

    def layer_head(self, layer: Any, head: Any) -> tuple[int, int]:
        cfg = self.page.loaded.config
        return int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))

    @refuses
    def run_policy(self, sid: str | None, policy: Any, budget: Any, sinks: Any, layer: Any, head: Any, prompt: Any,
                   chat: Any, system: Any, max_new: Any, on_context_full: Any = "stop") -> dict[str, Any]:
        """The Run button: caps first, then the generation under the policy with the full cache alongside."""
        spec = spec_of(policy, budget, sinks)
        lv, hv = self.layer_head(layer, head)
        n = admit_max_new(max_new, self.page.limits)
        loaded = self.page.loaded
        admitted = admit_prompt(loaded, self.page.limits, prompt, bool(chat), system)
        overflow = OVERFLOW.get(on_context_full, on_context_full)
        if overflow not in OVERFLOW.values():
            raise InputError(f"when the context is full: choose {' or '.join(OVERFLOW)}, got {str(on_context_full)[:40]!r}")
        visitor, state = self.state(sid)
        tok = loaded.tokenizer
        with visitor.exclusive(self.key):
            run = model_thread.call(watch_policy, loaded.model, admitted.ids, n, spec, tok.piece, tok.decode,
                                   loaded.stop_ids, overflow)
        state.run, state.layer, state.head = run, lv, hv
        return {"status": self.status(f"{run.label}: {len(run.steps)} tokens generated with the full cache alongside "
                                      f"(finished: {run.finish})"),
                **policy_views(run, lv, hv, "kvpolicy-summary-text")}

    @refuses
    def select(self, sid: str | None, layer: Any, head: Any) -> dict[str, Any]:
        """The layer / KV head selectors: redraw the map from the kept run (no model work)."""
        state = self.kept(sid)
        if state is None or state.run is None:
            raise InputError("nothing to show yet: press Run first")
        state.layer, state.head = self.layer_head(layer, head)
        return {"status": self.status(f"layer {state.layer}, KV head {state.head}"),
                "map": vk.kept_map_figure(state.run, state.layer, state.head)}

    @refuses
    def run_flash(self, sid: str | None, layer: Any, head: Any, prompt: Any, chat: Any, system: Any) -> dict[str, Any]:
        """The tiles button: the prompt's prefill, then one head through tiled attention."""
        import gradio as gr

        cfg = self.page.loaded.config
        lv, hv = int(layer_bound(cfg).parse(layer)), int(head_bound(cfg).parse(head))
        loaded = self.page.loaded
        admitted = admit_prompt(loaded, self.page.limits, prompt, bool(chat), system)
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            walk = model_thread.call(flash_walk, loaded.model, admitted.ids, lv, hv, loaded.tokenizer.piece)
        state.flash = walk
        return {"status": self.status(f"layer {lv}, head {hv}: {len(walk.tiles)} tiles"),
                "flash_text": vk.flash_html(walk), "flash_tile": vk.flash_tile_figure(walk, 0),
                "flash_state": vk.flash_state_figure(walk, 0), "tile": gr.update(maximum=max(len(walk.tiles), 2), value=1)}

    @refuses
    def select_tile(self, sid: str | None, tile: Any) -> dict[str, Any]:
        """The tile selector (1-based): redraw from the kept walk (no model work)."""
        state = self.kept(sid)
        if state is None or state.flash is None:
            raise InputError("nothing to show yet: press Step through tiles first")
        walk = state.flash
        i = int(tile_bound(len(walk.tiles)).parse(tile)) - 1
        return {"status": self.status(f"tile {i + 1}"), "flash_tile": vk.flash_tile_figure(walk, i),
                "flash_state": vk.flash_state_figure(walk, i)}
