"""The Sampling view: the newest step's logits turned into the token, stage by stage.

Slots: the waterfall of every stage's distribution (`inspector.viz.stages`: the Gemma 2 soft-cap, the
decoding processors, temperature, top-k, top-p, min-p) and the table of the chosen token and candidates,
with "what if it had picked..." buttons for the step's ten most likely tokens (the run branches there).
When a sampling control has just moved, the view shows the preview it computed from the stored logits
(`Visitor.preview`) until the next step. "Resample this step's token" draws the newest token again with the
controls' settings (a run event: `inspector.ui.handlers.Handlers.resample`).
"""

from __future__ import annotations

from typing import Any

from inspector.ui.panel import Slot, ViewPanel
from inspector.ui.visitors import Visitor
from inspector.viz import branches as vb
from inspector.viz import sampling as vs
from inspector.viz import stages as vst
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"
BRANCH_CHOICES = 10  # candidates offered as "what if it had picked..." buttons


class SamplingView(ViewPanel):
    key = "sampling"  # its tab: the view "sampling" of inspector.viz.registry
    caption = vs.CAPTION
    slots = (Slot("samp_fig", "sampling-bars", plot=True), Slot("samp_info", "sampling-view"))

    def layout(self) -> None:
        import gradio as gr

        self.caption_md()
        for s in self.slots:
            self.slot(s.key)
        self.resample_btn = gr.Button("Resample this step's token", elem_id="resample-btn")

    def wire(self) -> None:
        p = self.page
        p.handlers.on(self.resample_btn.click, p.handlers.resample, [p.sid, *p.sampling, p.layer, p.head], api_name="ui_resample")

    def blank(self) -> dict[str, Any]:
        return {"samp_fig": empty_figure(HINT), "samp_info": ""}

    def draw(self, visitor: Visitor, layer: Any = None, head: Any = None) -> dict[str, Any]:
        rec = visitor.session.records[-1]
        if visitor.preview is not None:
            actual = rec.sample.token_id if rec.sample else None
            return {"samp_fig": vst.chain_waterfall(visitor.preview, preview=True),
                    "samp_info": vs.sampling_info_html(visitor.preview, rec.step, preview_of=actual)
                    + vst.chain_table_html(visitor.preview)}
        if rec.sample is None:
            return {"samp_fig": empty_figure("no sample recorded"), "samp_info": ""}
        top = [(c.id, c.piece, c.prob_raw) for c in rec.sample.candidates[:BRANCH_CHOICES]]
        return {"samp_fig": vst.chain_waterfall(rec.sample),
                "samp_info": vs.sampling_info_html(rec.sample, rec.step) + vst.chain_table_html(rec.sample)
                + vb.force_buttons_html(rec.step, top, rec.sample.token_id)}
