"""The KV cache view: what every layer keeps for past positions, how it grew, and what a decode step costs
without it.

Slots: the bytes per layer now, the cache's growth per step against the weights' bytes, a summary, and
the newest step timed again without the cache ("Time this step without the cache": the whole sequence
recomputed on the prefill thread, the session unchanged). Below them the cache-policy section
(`inspector.ui.views.kv_policy`): the page's generation under an eviction policy.
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError
from inspector.ui.model_thread import call_prefill
from inspector.ui.panel import Page, Slot, ViewPanel
from inspector.ui.refusals import refuses
from inspector.ui.visitors import Visitor
from inspector.ui.views.kv_policy import KVPolicySection
from inspector.viz import kvcache as vk
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"


class KVCacheView(ViewPanel):
    key = "kv"  # its tab: the view "kv" of inspector.viz.registry
    caption = vk.CAPTION
    slots = (Slot("kv_summary", "kv-summary-view"), Slot("kv_bars", "kv-bars", plot=True),
             Slot("kv_growth", "kv-growth", plot=True), Slot("kv_recompute", "kv-recompute-view"))

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.policy = KVPolicySection(page)

    def layout(self) -> None:
        import gradio as gr

        self.caption_md()
        self.slot("kv_summary")
        with gr.Row():
            self.slot("kv_bars")
            self.slot("kv_growth")
        self.recompute_btn = gr.Button("Time this step without the cache (recompute the whole sequence)",
                                       elem_id="kv-recompute-btn")
        self.slot("kv_recompute")
        self.policy.layout()

    def wire(self) -> None:
        self.page.handlers.on(self.recompute_btn.click, self.recompute, [self.page.sid])
        self.policy.wire()

    def blank(self) -> dict[str, Any]:
        return {"kv_bars": empty_figure(HINT), "kv_growth": empty_figure(HINT), "kv_summary": "",
                "kv_recompute": vk.recompute_html(0.0, None, 0)}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        s = visitor.session
        rec = s.records[-1]
        weight_bytes = self.page.inventory.bytes
        return {"kv_bars": vk.layer_bars(rec.kv), "kv_growth": vk.growth_chart(s.records, weight_bytes),
                "kv_summary": vk.summary_html(rec.kv, weight_bytes, self.page.dtype_name),
                "kv_recompute": vk.recompute_html(rec.forward_ms, visitor.uncached_ms, rec.start_pos + rec.n_new,
                                                  rec.n_new)}

    @refuses
    def recompute(self, sid: Any) -> dict[str, Any]:
        """The button: time the newest step again without the cache (the session is left as it was)."""
        visitor = self.page.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records:
            raise InputError("nothing to recompute yet: press Prefill first")
        with visitor.exclusive("recompute"):
            rec = visitor.session.records[-1]
            visitor.uncached_ms = call_prefill(uncached_forward_ms, visitor.session)
        return {"kv_recompute": vk.recompute_html(rec.forward_ms, visitor.uncached_ms, rec.start_pos + rec.n_new,
                                                  rec.n_new),
                "status": self.page.handlers.render.status(visitor)}


def uncached_forward_ms(session: Any) -> float:
    """Wall time of the newest step recomputed over the whole sequence without the KV cache."""
    _diff, ms = session.recompute_last_step()
    return float(ms)
