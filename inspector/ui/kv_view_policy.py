"""The KV cache view's policy control: the page's generation runs under an eviction policy, and the view shows
what the cache kept.

`build_kv_policy_panel(ctx)` lays out, inside the KV cache view, the policy (full / window / sinks / h2o /
snapkv), the budget (positions each layer and KV head keeps), the sink count and "Generate under this
policy"; below them a layer and KV head selector and the views of `inspector.viz.kv_policies`: the
positions x steps map of the chosen layer and KV head (kept, colored by why: sink, recent, heavy hitter,
SnapKV vote; evicted in grey), per generated token the KL and top-1 agreement against the full cache on the
same token, and the bytes saved.

The button puts the policy in the page session's levers (`Session.set_levers`, the loop's `cache_policy`):
Prefill, Step and Play then generate under it, so the token view shows the text the policy gives. A run
the session already holds is run again under the policy for as many tokens (`inspector.session.intervene.
rerun`); Prefill keeps the choice (`use_policy`: a fresh policy object per generation). Then the session's
tokens, however they were sampled, are replayed through the policy with a full cache alongside
(`inspector.quant.kv_watch.watch_policy(forced=...)`): the session itself does not run the full cache, so
the comparison is computed when the button is pressed, for the tokens generated so far, and the view says
so. Pressing it again after more steps, with the same policy, only compares again.

The quantized caches (int8, int4) and the context-overflow choice of a greedy run stay in the KV policies
tab (`inspector.ui.kvpolicy_tab`), whose checks (`spec_of`, `kv_head_bound`), component layout
(`policy_controls`, `run_views`) and figure builders this panel reuses.
Bad input is one line in the panel's status; handlers never raise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.generation.cache_policies import POLICIES, KeepAll, make_policy
from inspector.quant.kv_eval import CacheSpec
from inspector.quant.kv_watch import watch_policy
from inspector.session.intervene import rerun
from inspector.ui import model_thread
from inspector.ui.fields import layer_bound
from inspector.ui.kvpolicy_tab import kv_head_bound, policy_controls, run_views, spec_of
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.viz import kv_policies as vk
from inspector.viz.common import empty_figure, status_line_html

LAB = "kv_view_policy"
IDS = {"summary": "kv-policy-summary-text"}


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "kv-policy-status-line")


def views(state: dict, message: str, error: bool = False) -> tuple:
    """(status, summary, map, metrics) from the kept comparison (placeholders before one)."""
    run = state.get("run")
    if run is None:
        return (status_html(message, error), "",
                empty_figure("The kept-positions map appears after Generate under this policy"),
                empty_figure("Per-token KL against the full cache appears after Generate under this policy"))
    return (status_html(message, error), vk.summary_html(run, IDS["summary"]),
            vk.kept_map_figure(run, state["layer"], state["head"]), vk.step_metrics_figure(run))


def _refused(message: str, *_: Any) -> tuple:
    return status_html(message, error=True), gr.skip(), gr.skip(), gr.skip()


def eviction_spec(policy: Any, budget: Any, sinks: Any) -> CacheSpec:
    """The chosen eviction policy as a checked `CacheSpec` (InputError naming what is allowed)."""
    if policy not in POLICIES:
        raise InputError(f"the KV cache view runs the eviction policies {', '.join(POLICIES)}; "
                         f"int8 and int4 caches are in the KV policies tab, got {str(policy)[:40]!r}")
    return spec_of(policy, budget, sinks)


def _policy(spec: CacheSpec) -> Any:
    """A fresh policy object for one generation (stateful policies start afresh)."""
    return KeepAll() if spec.policy == "full" else make_policy(spec.policy, spec.budget, spec.sinks)


def use_policy(entry: Any) -> None:
    """Put this browser's chosen policy in its session's levers (a new session, as Prefill makes, has none)."""
    state = entry.labs.get(LAB)
    if state and state.get("spec") is not None and entry.session is not None:
        state["policy"] = _policy(state["spec"])
        entry.session.set_levers(replace(entry.session.own_levers, cache_policy=state["policy"]))


def _apply_and_compare(ctx: TabContext, entry: Any, spec: CacheSpec, state: dict) -> tuple[str, Any]:
    """On the model thread: the session under the policy (its run again when the session holds another
    one), then the comparison with the full cache over its tokens. (what happened, KVPolicyRun or None)."""
    s = entry.session
    changed = state.get("spec") != spec or s.own_levers.cache_policy is not state.get("policy")
    if changed:
        state["spec"] = spec
        use_policy(entry)
        if s.records and s.records[-1].sample is not None:
            rerun(s, s.own_levers)
            entry.preview = entry.uncached_ms = None
    if not s.generated_ids:
        return "generation runs under it from the next Prefill", None
    tok = ctx.loaded.tokenizer
    run = watch_policy(ctx.loaded.model, list(s.prompt_ids), len(s.generated_ids), spec, tok.piece, tok.decode,
                       ctx.loaded.stop_ids, forced=list(s.generated_ids))
    again = "the run again under it, " if changed else ""
    return f"{again}{len(run.steps)} tokens of this run compared with the full cache", run


@shows_refusals(_refused)
def apply(ctx: TabContext, sid: str | None, policy: Any, budget: Any, sinks: Any, layer: Any, head: Any) -> tuple:
    """Generate under this policy: the session's levers, then the comparison of its tokens."""
    spec = eviction_spec(policy, budget, sinks)
    cfg = ctx.loaded.config
    lv, hv = int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        message, run = model_thread.run(_apply_and_compare, ctx, entry, spec, state)
    label = "the full cache" if spec.policy == "full" else f"{spec.policy}, budget {spec.budget}"
    if run is not None:
        state.update(run=run, layer=lv, head=hv)
    else:
        state.pop("run", None)
    return views(state, f"{label}: {message}; the session does not run the full cache beside it, so the KL "
                        "and top-1 are computed here, on its tokens")


def _select_refused(message: str, *_: Any) -> tuple:
    return status_html(message, error=True), gr.skip()


@shows_refusals(_select_refused)
def select(ctx: TabContext, sid: str | None, layer: Any, head: Any) -> tuple:
    """The layer / KV head selectors: redraw the map from the kept comparison (no model work)."""
    entry = ctx.store.get(sid)
    state = entry.labs.get(LAB) if entry is not None else None
    if not state or state.get("run") is None:
        raise InputError("nothing to show yet: press Generate under this policy after a Prefill")
    cfg = ctx.loaded.config
    state["layer"], state["head"] = int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))
    return (status_html(f"layer {state['layer']}, KV head {state['head']}"),
            vk.kept_map_figure(state["run"], state["layer"], state["head"]))


def build_kv_policy_panel(ctx: TabContext) -> None:
    """The policy control and its views, laid out where it is called (the KV cache view)."""
    fast = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
    cfg = ctx.loaded.config
    with gr.Accordion("Cache policy: evict positions and see what the next token loses", open=True,
                      elem_id="kv-policy-panel"):
        gr.Markdown(vk.CAPTION.replace("the model generates", "the page's generation runs"),
                    elem_classes="ii-caption")
        with gr.Row():
            policy, budget, sinks = policy_controls(POLICIES, "kv-policy")
            apply_btn = gr.Button("Generate under this policy", variant="primary", elem_id="kv-policy-apply")
        blank = views({}, "the page generates with the full cache; choose a policy, then Generate under this policy")
        status, summary, layer, head, kept, metrics = run_views(blank, "kv-policy", cfg)
    apply_btn.click(lambda sid, *a: apply(ctx, sid, *a), [ctx.sid, policy, budget, sinks, layer, head],
                    [status, summary, kept, metrics], **fast)
    for selector in (layer, head):
        selector.release(lambda sid, lv, hv: select(ctx, sid, lv, hv), [ctx.sid, layer, head], [status, kept],
                         trigger_mode="always_last", **fast)
