"""The Interventions lab's activation patching: a clean and a corrupted prompt, the answer and the wrong
token, and a point (resid_pre, attn_out, mlp_out); every layer x position patched from the clean run into the
corrupted one (`inspector.analysis.patching.sweep`), as the share of the logit difference recovered; a click
on a cell ("L:p") shows that patched run's next tokens and greedy continuation
(`inspector.analysis.patching.patched_run`). The sweep's setup is this section's state, so a cell redraws
without the sweep. It needs no run on the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.analysis import patching
from inspector.errors import InputError
from inspector.session.intervene import check_layer
from inspector.ui import model_thread
from inspector.ui.admission import admit_prompt
from inspector.ui.fields import patch_position_bound
from inspector.ui.panel import Page, Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.viz import interventions as viv

MAX_PATCH_TOKENS = 64  # a sweep costs layers x positions forwards' worth of blocks
PATCH_SHOW = 8  # tokens of a patched run shown


@dataclass(frozen=True)
class PatchSetup:
    """What the last sweep patched: the two prompts' ids, the answer and wrong token ids, the point."""

    clean: list[int]
    corrupt: list[int]
    answer: int
    wrong: int
    point: str


@dataclass
class PatchingState(PanelState):
    setup: PatchSetup | None = None


class PatchingSection(Panel):
    """Part of the Interventions lab (see the module docstring); its outputs are the lab's status and its own."""

    key, title, tab_id = "patching", "Activation patching", "iv-patching"
    status_id = "iv-status-line"
    State = PatchingState

    def __init__(self, page: Page, lab: Panel) -> None:
        super().__init__(page)
        self.lab = lab

    def layout(self) -> None:
        import gradio as gr

        self.outputs["status"] = self.lab.outputs["status"]
        with gr.Accordion("Activation patching", open=False):
            with gr.Row():
                self.clean = gr.Textbox("When Mary and John went to the store, John gave a drink to",
                                        label="clean prompt", elem_id="iv-clean")
                self.corrupt = gr.Textbox("When Mary and John went to the store, Mary gave a drink to",
                                          label="corrupted prompt (same token length)", elem_id="iv-corrupt")
            with gr.Row():
                self.answer = gr.Textbox(" Mary", label="answer token", elem_id="iv-answer")
                self.wrong = gr.Textbox(" John", label="wrong token", elem_id="iv-wrong")
                self.point = gr.Dropdown(list(patching.POINTS), value="resid_pre", label="point",
                                         elem_id="iv-patch-point")
                self.button = gr.Button("Patch every layer × position", elem_id="iv-patch")
            self.show("table", gr.HTML("", elem_id="iv-patch-table"))
            self.show("patched", gr.HTML("<div id='iv-patched-run'></div>", elem_id="iv-patched"))
            # what static/app.js sends for a click on a patching cell ("L:p")
            self.cell = gr.Textbox(elem_id="iv-cell-request", elem_classes="ii-offscreen", container=False)

    def wire(self) -> None:
        p = self.page
        self.on(self.button.click, self.sweep, [p.sid, self.clean, self.corrupt, self.answer, self.wrong, self.point])
        self.on(self.cell.input, self.patched_cell, [p.sid, self.cell])

    def token(self, text: Any, what: str) -> int:
        text = str(text or "")
        ids = self.page.loaded.tokenizer.encode(text) if text else []
        if len(ids) != 1:
            raise InputError(f"the {what} token must be exactly one token, {text!r} is {len(ids)}: a word's token "
                             "usually starts with a space")
        return ids[0]

    @refuses
    def sweep(self, sid: str | None, clean: Any, corrupt: Any, answer: Any, wrong: Any, point: Any) -> dict[str, Any]:
        """The layer x position sweep of the page's model (no running session needed)."""
        loaded, limits = self.page.loaded, self.page.limits
        c = admit_prompt(loaded, limits, clean, False, None).ids
        r = admit_prompt(loaded, limits, corrupt, False, None).ids
        if max(len(c), len(r)) > MAX_PATCH_TOKENS:
            raise InputError(f"patching prompts may be up to {MAX_PATCH_TOKENS} tokens here, got {max(len(c), len(r))}")
        if point not in patching.POINTS:
            raise InputError(f"unknown patching point {point!r}: use one of {', '.join(patching.POINTS)}")
        a, w = self.token(answer, "answer"), self.token(wrong, "wrong")
        tok = loaded.tokenizer
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            s = model_thread.call_prefill(patching.sweep, loaded.model, c, r, a, w, point,
                                         pieces=(tok.pieces(c), tok.pieces(r)))
            state.setup = PatchSetup(c, r, a, w, point)
        return {"status": self.status(f"patched {len(s.layers)} layers x {len(s.positions)} positions in "
                                      f"{s.seconds:.1f} s"),
                "table": viv.patch_table_html(s), "patched": "<div id='iv-patched-run'></div>"}

    @refuses
    def patched_cell(self, sid: str | None, cell: Any) -> dict[str, Any]:
        """A click on a patching cell "L:p": that patched run's next tokens and greedy continuation."""
        state = self.kept(sid)
        if state is None or state.setup is None:
            raise InputError("run a patching sweep first")
        setup = state.setup
        layer, _, position = str(cell or "").partition(":")
        L = check_layer(self.page.loaded.config, layer)
        p = int(patch_position_bound(len(setup.corrupt)).parse(position))
        visitor = self.page.store.get(sid)
        loaded = self.page.loaded
        tok = loaded.tokenizer
        with visitor.exclusive(self.key):
            run = model_thread.call(patching.patched_run, loaded.model, setup.clean, setup.corrupt, setup.answer,
                                   setup.wrong, setup.point, L, p, piece=tok.piece, decode=tok.decode, n=PATCH_SHOW)
        return {"status": self.status(f"patched run at layer {L}, position {p}"), "patched": viv.patched_run_html(run)}
