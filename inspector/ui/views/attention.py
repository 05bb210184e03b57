"""The Attention view: the pattern of one layer and query head, every head's row at a glance, and which
query heads share a KV head.

Its layer and query-head sliders are page-wide inputs (every view event reads them: `Page.layer`,
`Page.head`). Slots: for the prefill (no position selected) the head's whole causal pattern, else the
selected position's row; an image of every layer and head's row for that position (local layers marked
when the model has sliding-window layers); a line with the keys attended and the KV-group table. A layer
or head outside the model is refused by name, never clamped. Below them the head atlas section
(`inspector.ui.views.head_atlas`): every head's role on a probe, and what ablating the strongest heads does.
"""

from __future__ import annotations

from typing import Any

from inspector.ui.fields import head_bound, layer_bound, slider
from inspector.ui.panel import Page, Slot, ViewPanel
from inspector.ui.views.head_atlas import HeadAtlasSection
from inspector.ui.visitors import Visitor
from inspector.viz import attention as va
from inspector.viz import residual as vr
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"


class AttentionView(ViewPanel):
    key = "attention"  # its tab: the view "attention" of inspector.viz.registry
    caption = va.CAPTION
    wants_overview = True
    slots = (Slot("attn_info", "attn-info"), Slot("attn_fig", "attn-pattern", plot=True),
             Slot("attn_overview", "attn-overview", heavy=True))

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.atlas = HeadAtlasSection(page)

    def layout(self) -> None:
        import gradio as gr

        cfg = self.page.loaded.config
        self.caption_md()
        with gr.Row():
            self.page.layer = slider(layer_bound(cfg), 0, 1, "layer", "attn-layer")
            self.page.head = slider(head_bound(cfg), 0, 1, "query head", "attn-head")
        for s in self.slots:
            self.slot(s.key)
        self.atlas.layout()

    def wire(self) -> None:
        self.atlas.wire()

    def blank(self) -> dict[str, Any]:
        cfg = self.page.loaded.config
        return {"attn_fig": empty_figure(HINT), "attn_overview": "",
                "attn_info": va.kv_groups_html(cfg.num_attention_heads, cfg.num_key_value_heads)}

    def window(self, layer: int) -> int | None:
        """The window of a local (sliding-window) layer, None for a global one."""
        cfg = self.page.loaded.config
        return cfg.sliding_window if cfg.layer_type(layer) == "sliding_attention" else None

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        s = visitor.session
        cfg = self.page.loaded.config
        layer, head = layer_bound(cfg).parse(layer), head_bound(cfg).parse(head)  # refused, never clamped
        n_rep = cfg.num_attention_heads // cfg.num_key_value_heads
        pos = visitor.selected_position()
        rec, col = vr.locate(s.records, pos)
        pieces = s.token_pieces()
        kv_head = head // n_rep
        if rec.kind == "prefill" and visitor.selected is None:
            pat = s.attention_pattern(rec.step, layer, head)  # (n_new, n_keys)
            fig = va.pattern_heatmap(pat, pieces, rec.start_pos, layer, head, kv_head, self.window(layer))
            n_keys = pat.shape[1]
        else:
            row = s.attention_row(rec.step, layer, head, col)  # (n_keys,)
            fig = va.row_bars(row, pieces, len(s.prompt_ids), pos, layer, head, kv_head, self.window(layer))
            n_keys = row.shape[0]
        rows = s.attention_overview(rec.step, col)  # (L, H, n_keys)
        local = [self.window(i) is not None for i in range(cfg.num_hidden_layers)]
        over = va.overview_html(rows, pieces, n_rep, pos, layer, head, local if any(local) else None)
        groups = rec.kv[layer].kv_head_groups if rec.kv else None
        window = self.window(layer)
        local = (f"; this local layer gives weight only to the newest {window:,} of them"
                 if window is not None and n_keys > window else "")
        info = (f'<div id="attention-info" data-keys="{n_keys}" data-query="{pos}">Query position {pos}: '
                f'reads <b id="attention-keys">{n_keys}</b> cached keys ({rec.kind} step {rec.step}){local}.</div>'
                + va.kv_groups_html(cfg.num_attention_heads, cfg.num_key_value_heads, groups, head))
        return {"attn_fig": fig, "attn_overview": over, "attn_info": info}
