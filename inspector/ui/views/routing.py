"""The Routing view of a mixture-of-experts model: which experts each token went to, what the router weighed
for one token in one layer, and how the run's tokens spread over the experts (`inspector.viz.routing`).

On the page of a mixture of experts only (`applies`). Slots: tokens × layers coloured by the expert each
token's router ranked first (an image), the router's distribution over every expert for the selected token
(`Visitor.selected_position`: the clicked one, else the newest) in the selected layer, the chosen ones marked
with their weights, and per layer the share of the run's tokens sent to each expert so far. The layer is
the page's one (`Page.layer`, the Attention view's slider): this tab has a slider of its own that moves
with it both ways, and moving it redraws this view. A layer outside the model is refused by name.
"""

from __future__ import annotations

from typing import Any

from inspector.ui.fields import layer_bound, slider
from inspector.ui.panel import NO_LOADING_STATUS, Slot, ViewPanel
from inspector.ui.visitors import Visitor
from inspector.viz import routing as vr
from inspector.viz.common import empty_figure

HINT = "Type a prompt and press Prefill"
CAPTION = (vr.CAPTION + " Pick the layer with the slider here (the Attention view's layer: either slider moves "
           "both) and the token by clicking it in the token column (the newest when none is clicked).")
MIRROR = "(value) => value"  # a slider's value copied to the other in the browser (no server round trip)


class RoutingView(ViewPanel):
    key = "routing"  # its tab: the view "routing" of inspector.viz.registry
    caption = CAPTION
    slots = (Slot("routing_map", "routing-map-view", heavy=True), Slot("router_fig", "router-chart", plot=True),
             Slot("routing_load", "routing-load-view"))

    def layout(self) -> None:
        self.caption_md()
        self.layer = slider(layer_bound(self.page.loaded.config), 0, 1, "layer (the Attention view's too)",
                            "routing-layer")
        for s in self.slots:
            self.slot(s.key)

    def wire(self) -> None:
        page = self.page
        quiet = {"js": MIRROR, "queue": False, **NO_LOADING_STATUS, "api_visibility": "undocumented"}
        page.layer.change(None, [page.layer], [self.layer], **quiet)  # any change of the page's layer shows here
        self.layer.release(None, [self.layer], [page.layer], **quiet)  # a move here is the page's layer
        page.handlers.on(self.layer.release, page.handlers.redraw_tab(self.key), [page.sid, self.layer, page.head],
                    api_name="ui_routing_layer", trigger_mode="always_last")

    def blank(self) -> dict[str, Any]:
        return {"routing_map": "", "router_fig": empty_figure(HINT), "routing_load": ""}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        s = visitor.session
        layer = layer_bound(self.page.loaded.config).parse(layer)  # refused, never clamped
        pos = visitor.selected_position()
        pieces = s.token_pieces()
        return {"routing_map": vr.routing_map(s.records, pieces, pos, layer),
                "router_fig": vr.router_chart(s.records, pos, layer, pieces[pos] if pos < len(pieces) else ""),
                "routing_load": vr.expert_load(s.records)}
