"""The Interventions lab: change the page's running model and see why it said what it said.

The tab lays out four parts:
- Apply: a point (a head's output, a whole attention or MLP output, blocked attention query -> key,
  steering at resid_pre), layer, head, operation and its numbers. "Apply to this run" runs the page's
  prompt again under the branch in use's levers plus this intervention (`inspector.session.intervene`), as
  far as the run had gone, and makes a branch labelled with what it changed in the page's branch tree. A
  branch number here switches branches (the page's tree does too).
- Compare two branches (`inspector.analysis.compare`): both texts with the first diverging token marked,
  the top tokens side by side per step, the per-layer norm of the residual difference.
- Attribution of one step (`inspector.analysis.attribution.attribute_step`): the DLA bars (click a head or
  MLP bar to ablate it: the same as Apply) and the commitment layer of every step along the token strip.
- Patching (`inspector.ui.labs.patching`): clean and corrupted prompts, answer and wrong token, point; the
  layer x position table; a click on a cell shows that patched run's next tokens.
The page's run is the browser session's `visitor.session` (Prefill on the page first). Model work runs on the
model threads under the visitor's lock; a refusal is one line in the tab's status.
"""

from __future__ import annotations

from typing import Any

from inspector.analysis.attribution import attribute_step
from inspector.analysis.compare import compare
from inspector.analysis.findings import commitment_layer
from inspector.errors import InputError
from inspector.session.branches import BranchTree
from inspector.session.intervene import interventions_for, levers_with, replay, rerun
from inspector.ui import model_thread
from inspector.ui.fields import branch_bound, generated_step_bound
from inspector.ui.figure import Figure
from inspector.ui.labs.patching import PatchingSection
from inspector.ui.panel import Page, Panel
from inspector.ui.refusals import refuses
from inspector.viz import interventions as viv
from inspector.viz.common import empty_figure, esc, show_piece

POINTS = {"head output (attn.hook_z)": "head", "attention output": "attn_out", "MLP output": "mlp_out",
          "block attention query → key": "block", "steer at resid_pre": "steer"}
OPS = ["zero", "scale", "mean"]
CAPTION = ("Change the model while it generates: switch off a head, an attention or MLP output, block attention from "
           "one position to another, or steer the residual stream. Each change runs the page's prompt again under it "
           "and makes a branch; compare branches, see which heads and MLPs wrote a token's logit, and patch "
           "activations from a clean prompt into a corrupted one.")


def tree_of(visitor: Any) -> BranchTree:
    """The page run's branch tree (made when first needed), in step with the run."""
    s = visitor.session
    if visitor.branches is None:
        visitor.branches = BranchTree(s.generated_ids, s.text, levers=s.own_levers)
    visitor.branches.sync(s.generated_ids, s.text)
    return visitor.branches


def branches_html(visitor: Any) -> str:
    """The branches of the page's run: id, what it changed, its text; the one in use marked."""
    tree = visitor.branches if visitor is not None else None
    if tree is None:
        return "<div id='iv-branches' data-branches='1'>one branch: the run as sampled</div>"
    rows = []
    for b in tree.branches:
        what = b.label or ("as sampled" if b.at_step is None else f"step {b.at_step} ← {show_piece(b.forced_piece, 12)}")
        mark = " ◀ in use" if b.id == tree.current else ""
        rows.append(f"<div class='iv-branch' data-branch='{b.id}'><b>#{b.id}</b> {esc(what)}{mark}: "
                    f"<span class='ii-branch-text'>{esc(b.text[-80:])}</span></div>")
    return f"<div id='iv-branches' data-branches='{len(tree.branches)}'>{''.join(rows)}</div>"


def run_text(visitor: Any) -> str:
    s = visitor.session
    return (f"<div id='iv-run-text' data-generated='{len(s.generated_ids)}' style='white-space:pre-wrap'>"
            f"{esc(s.text)}</div>")


class InterventionsLab(Panel):
    key, title, tab_id = "interventions", "Interventions", "tab-interventions"
    status_id = "iv-status-line"

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.patching = PatchingSection(page, self)

    def run_session(self, sid: str | None) -> tuple[Any, Any]:
        visitor = self.page.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records:
            raise InputError("nothing to change yet: press Prefill on the page first")
        return visitor, visitor.session

    def run_views(self, visitor: Any, message: str) -> dict[str, Any]:
        return {"status": self.status(message), "branches": branches_html(visitor), "text": run_text(visitor)}

    def layout(self) -> None:
        import gradio as gr

        cfg = self.page.loaded.config
        gr.Markdown(CAPTION, elem_classes="ii-caption")
        self.show("status", gr.HTML(self.status("press Prefill on the page, then apply an intervention"),
                                    elem_id="iv-status"))
        with gr.Row():
            self.point = gr.Dropdown(list(POINTS), value=next(iter(POINTS)), label="point", elem_id="iv-point")
            self.op = gr.Dropdown(OPS, value="zero", label="operation", elem_id="iv-op")
            self.layer = gr.Textbox("0", label=f"layer (0-{cfg.num_hidden_layers - 1})", elem_id="iv-layer")
            self.head = gr.Textbox("0", label=f"head (0-{cfg.num_attention_heads - 1})", elem_id="iv-head")
            self.factor = gr.Textbox("0.5", label="scale factor", elem_id="iv-factor")
        with gr.Row():
            self.query = gr.Textbox("1", label="query position (block)", elem_id="iv-query")
            self.key_pos = gr.Textbox("0", label="key position (block)", elem_id="iv-key")
            self.towards = gr.Textbox("love", label="steer towards", elem_id="iv-towards")
            self.away = gr.Textbox("hate", label="steer away from", elem_id="iv-away")
            self.alpha = gr.Textbox("4.0", label="steering α", elem_id="iv-alpha")
        with gr.Row():
            self.apply_btn = gr.Button("Apply to this run", variant="primary", elem_id="iv-apply")
            self.branch_no = gr.Textbox("0", label="branch", elem_id="iv-branch")
            self.switch_btn = gr.Button("Switch to branch", elem_id="iv-switch")
        self.show("branches", gr.HTML(branches_html(None), elem_id="iv-branches-box"))
        self.show("text", gr.HTML("<div id='iv-run-text'></div>", elem_id="iv-run"))
        with gr.Accordion("Compare two branches", open=True):
            with gr.Row():
                self.a = gr.Textbox("0", label="branch A", elem_id="iv-cmp-a")
                self.b = gr.Textbox("1", label="branch B", elem_id="iv-cmp-b")
                self.cmp_btn = gr.Button("Compare", elem_id="iv-compare")
            self.show("compare", gr.HTML("", elem_id="iv-compare-view"))
            self.show("compare_fig", Figure(empty_figure("The residual difference per layer appears here"),
                                            show_label=False, elem_id="iv-compare-fig"))
        with gr.Accordion("Direct logit attribution and commitment layer", open=True):
            with gr.Row():
                self.step = gr.Textbox("-1", label="step (-1 = newest)", elem_id="iv-step")
                self.dla_btn = gr.Button("Attribute", elem_id="iv-attribute")
            self.show("dla", gr.HTML("", elem_id="iv-dla"))
            self.show("strip", gr.HTML("", elem_id="iv-commitment"))
            # what static/app.js sends for a click on a DLA bar ("head L.H" or "mlp L")
            self.part = gr.Textbox(elem_id="iv-part-request", elem_classes="ii-offscreen", container=False)
        self.patching.layout()

    def wire(self) -> None:
        p = self.page
        run_outs = ["status", "branches", "text"]
        self.on(self.apply_btn.click, self.apply, [p.sid, self.point, self.op, self.layer, self.head, self.factor,
                                                   self.query, self.key_pos, self.towards, self.away, self.alpha],
                run_outs)
        self.on(self.part.input, self.ablate_part, [p.sid, self.part], run_outs)
        self.on(self.switch_btn.click, self.switch, [p.sid, self.branch_no], run_outs)
        self.on(self.cmp_btn.click, self.compare_branches, [p.sid, self.a, self.b], ["status", "compare", "compare_fig"])
        self.on(self.dla_btn.click, self.attribution, [p.sid, self.step], ["status", "dla", "strip"])
        self.patching.wire()

    def _apply_on_thread(self, visitor: Any, args: tuple) -> str:
        s = visitor.session
        tree = tree_of(visitor)
        point, *rest = args
        new = interventions_for(self.page.loaded, s, POINTS.get(point, point), *rest)
        levers = levers_with(s, new)
        label = " + ".join(dict.fromkeys(iv.label for iv in new))
        rerun(s, levers)
        visitor.preview = visitor.uncached_ms = None
        b = tree.fork_levers(label, levers, s.generated_ids, s.text)
        return f"branch #{b.id}: {label} ({len(s.generated_ids)} tokens run again under it)"

    @refuses
    def apply(self, sid: str | None, *args: Any) -> dict[str, Any]:
        """Apply to this run: a new branch, the page's run under the branch in use's levers and this change.
        `args`: point, op, layer, head, factor, query, key, towards, away, alpha."""
        visitor, _ = self.run_session(sid)
        with visitor.exclusive(self.key):
            message = model_thread.call(self._apply_on_thread, visitor, args)
        return self.run_views(visitor, message)

    def ablate_part(self, sid: str | None, part: Any) -> dict[str, Any]:
        """A click on a DLA bar: "head L.H" or "mlp L" -> zero it (as Apply)."""
        name, _, spec = str(part or "").strip().partition(" ")
        if name == "head":
            layer, _, head = spec.partition(".")
            return self.apply(sid, "head", "zero", layer, head, 0, 0, 0, "", "", 0)
        if name == "mlp":
            return self.apply(sid, "mlp_out", "zero", spec, 0, 0, 0, 0, "", "", 0)
        return self.refusal(f"only a head or an MLP can be ablated, got {str(part)[:40]!r}")

    @refuses
    def switch(self, sid: str | None, branch: Any) -> dict[str, Any]:
        """Make the page's run the chosen branch (its levers and tokens)."""
        visitor, _ = self.run_session(sid)
        tree = tree_of(visitor)
        target = tree.get(int(branch_bound(len(tree)).parse(branch)))
        with visitor.exclusive(self.key):
            model_thread.call(replay, visitor.session, target.levers, target.generated_ids)
        tree.current = target.id
        visitor.preview = visitor.uncached_ms = None
        return self.run_views(visitor, f"switched to branch #{target.id}")

    @refuses
    def compare_branches(self, sid: str | None, a: Any, b: Any) -> dict[str, Any]:
        """Two branches side by side (replayed in sessions of their own)."""
        visitor, s = self.run_session(sid)
        tree = tree_of(visitor)
        ids = [int(branch_bound(len(tree), f"branch {n}").parse(v)) for n, v in (("A", a), ("B", b))]
        ba, bb = tree.get(ids[0]), tree.get(ids[1])
        params = s.records[-1].sample.params
        side = [(f"#{x.id} {x.label or ('as sampled' if x.at_step is None else f'step {x.at_step} forced')}",
                 x.levers, x.generated_ids) for x in (ba, bb)]
        with visitor.exclusive(self.key):
            c = model_thread.call(compare, self.page.loaded, s.prompt_ids, params, *side, max_new_tokens=s.max_new_tokens)
        return {"status": self.status(f"compared #{ba.id} and #{bb.id}"), "compare": viv.compare_html(c),
                "compare_fig": viv.resid_diff_figure(c)}

    @staticmethod
    def _attribution_views(visitor: Any, step: int) -> tuple[str, str]:
        s = visitor.session
        a = attribute_step(s, step)
        layers = []
        for k in range(len(s.records)):
            lens = s.logit_lens(k) if s.record else []
            layers.append(commitment_layer([row[0].id for row in lens]) if lens else None)
        strip = viv.commitment_strip_html(s.tokenizer.pieces(s.generated_ids), layers, s.config.num_hidden_layers)
        return viv.dla_html(a), strip

    @refuses
    def attribution(self, sid: str | None, step: Any) -> dict[str, Any]:
        """The DLA bars of one step (-1: the newest) and the commitment layer of every step."""
        visitor, s = self.run_session(sid)
        k = int(generated_step_bound(len(s.generated_ids)).parse(step))
        k = len(s.generated_ids) - 1 if k < 0 else k
        with visitor.exclusive(self.key):
            bars, strip = model_thread.call(self._attribution_views, visitor, k)
        return {"status": self.status(f"attribution of step {k}"), "dla": bars, "strip": strip}
