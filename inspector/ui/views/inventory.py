"""The Tensor inventory view: every weight of the model with its shape, dtype, parameters and bytes, and
what precision the numbers are in (the precision note). A layer can be highlighted. It draws nothing per
step: the inventory is the model's, the same for every run.
"""

from __future__ import annotations

from typing import Any

from inspector.ui.panel import ViewPanel
from inspector.ui.visitors import Visitor
from inspector.viz import inventory as vi
from inspector.viz.precision import precision_note


class InventoryView(ViewPanel):
    key = "inventory"  # its tab: the view "inventory" of inspector.viz.registry
    caption = vi.CAPTION

    def layout(self) -> None:
        import gradio as gr

        loaded = self.page.loaded
        self.caption_md(" ".join([vi.CAPTION, precision_note(loaded.source_format or "", self.page.dtype_name, loaded.source_types)]))
        self.layer = gr.Dropdown(["none"] + [str(i) for i in range(loaded.config.num_hidden_layers)], value="none",
                                 label="highlight layer", elem_id="inv-layer")
        self.show("inventory", gr.HTML(self.inventory_html(None), elem_id="inventory"))

    def wire(self) -> None:
        self.on(self.layer.change, self.highlight, [self.layer])

    def inventory_html(self, layer: Any) -> str:
        sel = None if layer in (None, "", "none") else int(layer)
        return vi.inventory_html(list(self.page.inventory.entries), self.page.loaded.config.tie_word_embeddings, sel)

    def highlight(self, layer: Any) -> dict[str, Any]:
        """The highlight dropdown: the table with that layer's rows marked."""
        return {"inventory": self.inventory_html(layer)}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        return {}
