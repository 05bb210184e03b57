"""The KV cache view's policy section: the page's generation runs under an eviction policy, and the view
shows what the cache kept.

The section lays out, inside the KV cache view, the policy (full / window / sinks / h2o / snapkv), the
budget (positions each layer and KV head keeps), the sink count and "Generate under this policy"; below them
a layer and KV head selector and the views of `inspector.viz.kv_policies`: the positions x steps map of the
chosen layer and KV head (kept, colored by why: sink, recent, heavy hitter, SnapKV vote; evicted in grey),
per generated token the KL and top-1 agreement against the full cache on the same token, and the bytes a
compacting cache would save.

The button puts the policy in the page session's levers (`inspector.session.intervene.use_cache_policy`):
Prefill, Step and Play then generate under it, so the token view shows the text the policy gives. A run the
session already holds is run again under the policy for as many tokens (`rerun`); Prefill keeps the choice
(`use_policy`: a fresh policy object per generation). Then the session's tokens, however they were sampled,
are replayed through the policy with a full cache alongside (`inspector.quant.kv_watch.watch_policy(forced=...)`):
the session itself does not run the full cache, so the comparison is computed when the button is pressed,
for the tokens generated so far, and the view says so. Pressing it again after more steps, with the same
policy, only compares again.

The quantized caches (int8, int4) and the context-overflow choice of a greedy run stay in the KV policies lab
(`inspector.ui.labs.kv_policies`), whose checks (`spec_of`, `kv_head_bound`), component layout
(`policy_controls`, `run_views`) and figure builders this section reuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.quant.kv_eval import EVICTION_POLICIES, CacheSpec
from inspector.quant.kv_watch import watch_policy
from inspector.session.intervene import rerun, use_cache_policy
from inspector.ui import model_thread
from inspector.ui.fields import layer_bound
from inspector.ui.labs.kv_policies import kv_head_bound, policy_controls, policy_views, run_views, spec_of
from inspector.ui.panel import Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.ui.visitors import Visitor


@dataclass
class KVPolicyState(PanelState):
    """The policy chosen for the page's generation, the object in use, and the last comparison shown."""

    spec: CacheSpec | None = None
    policy: Any = None  # the policy object in the session's levers (a fresh one per generation)
    run: Any = None  # inspector.quant.measurements.KVPolicyRun: the comparison with the full cache
    layer: int = 0
    head: int = 0


def use_policy(visitor: Visitor) -> None:
    """Put this browser's chosen policy in its session's levers (a new session, as Prefill makes, has none)."""
    state = visitor.labs.get(KVPolicySection.key)
    if state is not None and state.spec is not None and visitor.session is not None:
        state.policy = state.spec.eviction_policy()
        use_cache_policy(visitor.session, state.policy)


class KVPolicySection(Panel):
    """Part of the KV cache view (not a tab of its own): see the module docstring."""

    key, title, tab_id = "kv_view_policy", "Cache policy", "kv-policy-panel"
    status_id = "kv-policy-status-line"
    State = KVPolicyState
    summary_id = "kv-policy-summary-text"

    def views(self, state: KVPolicyState, message: str, error: bool = False) -> dict[str, Any]:
        return {"status": self.status(message, error),
                **policy_views(state.run, state.layer, state.head, self.summary_id,
                               "Generate under this policy", "Per-token KL")}

    def layout(self) -> None:
        import gradio as gr

        with gr.Accordion("Cache policy: evict positions and see what the next token loses", open=True,
                          elem_id=self.tab_id):
            from inspector.viz import kv_policies as vk

            gr.Markdown(vk.CAPTION.replace("the model generates", "the page's generation runs"),
                        elem_classes="ii-caption")
            with gr.Row():
                self.policy, self.budget, self.sinks = policy_controls(EVICTION_POLICIES, "kv-policy")
                self.apply_btn = gr.Button("Generate under this policy", variant="primary", elem_id="kv-policy-apply")
            blank = self.views(KVPolicyState(), "the page generates with the full cache; choose a policy, then "
                                                "Generate under this policy")
            self.layer, self.head = run_views(self, blank, "kv-policy", self.page.loaded.config)

    def wire(self) -> None:
        self.on(self.apply_btn.click, self.apply, [self.page.sid, self.policy, self.budget, self.sinks, self.layer,
                                                   self.head])
        self.on([self.layer.release, self.head.release], self.select, [self.page.sid, self.layer, self.head],
                ["status", "map"], trigger_mode="always_last")

    def _apply_and_compare(self, visitor: Visitor, spec: CacheSpec, state: KVPolicyState) -> tuple[str, Any]:
        """On the model thread: the session under the policy (its run again when the session holds another
        one), then the comparison with the full cache over its tokens. (what happened, KVPolicyRun or None)."""
        s = visitor.session
        changed = state.spec != spec or s.own_levers.cache_policy is not state.policy
        if changed:
            state.spec = spec
            use_policy(visitor)
            if s.records and s.records[-1].sample is not None:
                rerun(s, s.own_levers)
                visitor.preview = visitor.uncached_ms = None
        if not s.generated_ids:
            return "generation runs under it from the next Prefill", None
        loaded = self.page.loaded
        tok = loaded.tokenizer
        run = watch_policy(loaded.model, list(s.prompt_ids), len(s.generated_ids), spec, tok.piece, tok.decode,
                           loaded.stop_ids, forced=list(s.generated_ids))
        again = "the run again under it, " if changed else ""
        return f"{again}{len(run.steps)} tokens of this run compared with the full cache", run

    @refuses
    def apply(self, sid: str | None, policy: Any, budget: Any, sinks: Any, layer: Any, head: Any) -> dict[str, Any]:
        """Generate under this policy: the session's levers, then the comparison of its tokens."""
        if policy not in EVICTION_POLICIES:
            raise InputError(f"the KV cache view runs the eviction policies {', '.join(EVICTION_POLICIES)}; "
                             f"int8 and int4 caches are in the KV policies tab, got {str(policy)[:40]!r}")
        spec = spec_of(policy, budget, sinks)
        cfg = self.page.loaded.config
        lv, hv = int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            message, run = model_thread.call(self._apply_and_compare, visitor, spec, state)
        label = "the full cache" if spec.policy == "full" else f"{spec.policy}, budget {spec.budget}"
        state.run, state.layer, state.head = run, lv, hv
        return self.views(state, f"{label}: {message}; the session does not run the full cache beside it, so the "
                                 "KL and top-1 are computed here, on its tokens")

    @refuses
    def select(self, sid: str | None, layer: Any, head: Any) -> dict[str, Any]:
        """The layer / KV head selectors: redraw the map from the kept comparison (no model work)."""
        state = self.kept(sid)
        if state is None or state.run is None:
            raise InputError("nothing to show yet: press Generate under this policy after a Prefill")
        cfg = self.page.loaded.config
        state.layer, state.head = int(layer_bound(cfg).parse(layer)), int(kv_head_bound(cfg).parse(head))
        from inspector.viz import kv_policies as vk

        return {"status": self.status(f"layer {state.layer}, KV head {state.head}"),
                "map": vk.kept_map_figure(state.run, state.layer, state.head)}
