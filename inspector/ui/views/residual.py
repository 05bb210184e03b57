"""The Residual stream view: the hidden vector's size at every layer and position, and the logit lens.

Slots: a layers x positions heatmap of the residual norm (an image, `inspector.viz.heatimage`), the
selected position's chart through the layers (what attention and the MLP add, before Gemma's post-norms
too), and the logit lens of the newest step (computed on first request unless it ran ahead: the forward
run ahead after a Step computes it when this view is open, `wants_lens`). While Play runs the lens is not
computed (an LM-head product per layer would slow every step down); the step Play stops at gets it.
"""

from __future__ import annotations

from typing import Any

from inspector.ui.panel import Slot, ViewPanel
from inspector.ui.visitors import Visitor
from inspector.viz import residual as vr
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"
PLAYING_LENS = ('<div id="logit-lens-playing" class="ii-caption">The logit lens is drawn when Play stops or is '
                "paused.</div>")


class ResidualView(ViewPanel):
    key = "residual"  # its tab: the view "residual" of inspector.viz.registry
    caption = vr.CAPTION
    slots = (Slot("resid_heat", "resid-heatmap", heavy=True), Slot("resid_pos", "resid-position", plot=True),
             Slot("lens", "logit-lens-view", heavy=True))
    wants_lens = True

    def layout(self) -> None:
        self.caption_md()
        for s in self.slots:
            self.slot(s.key)

    def blank(self) -> dict[str, Any]:
        return {"resid_heat": "", "resid_pos": empty_figure(HINT), "lens": ""}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        s = visitor.session
        rec = s.records[-1]
        pieces = s.token_pieces()
        pos = visitor.selected_position()
        views = {"resid_heat": vr.residual_heatmap(s.records, pieces, pos),
                 "resid_pos": vr.position_chart(s.records, pos, pieces[pos] if pos < len(pieces) else "")}
        if visitor.playing:
            views["lens"] = PLAYING_LENS
        else:
            s.logit_lens(rec.step)  # an LM-head product per layer, once per step (kept)
            views["lens"] = vr.logit_lens_html(rec, rec.sample.token_piece if rec.sample else None)
        return views
