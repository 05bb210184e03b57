"""The Interventions lab tab: change the page's running model and see why it said what it said.

`build_interventions_tab(ctx)` lays out four parts:
- Apply: a point (a head's output, a whole attention or MLP output, blocked attention query -> key,
  steering at resid_pre), layer, head, operation and its numbers. "Apply to this run" runs the page's
  prompt again under the branch in use's levers plus this intervention (`inspector.session.intervene.rerun`),
  as far as the run had gone, and makes a branch labelled with what it changed in the page's branch tree.
  A branch list here switches branches (the page's tree does too).
- Compare two branches (`inspector.analysis.compare`): both texts with the first diverging token marked,
  the top tokens side by side per step, the per-layer norm of the residual difference.
- Attribution of one step (`inspector.analysis.attribution.attribute_step`): the DLA bars (click a head or
  MLP bar to ablate it: the same as Apply) and the commitment layer of every step along the token strip.
- Patching: clean and corrupted prompts, answer and wrong token, point; the layer x position table
  (`inspector.analysis.patching.sweep`); a click on a cell shows that patched run's next tokens.
The page's run is the browser session's `entry.session` (Prefill on the page first); the patching sweep
lives in the lab state (`lab_state(ctx, sid, "interventions")`). Model work runs on the model threads
under the entry's lock; a refusal is one line in the tab's status (`shows_refusals`). Handlers are
module functions of (ctx, ...), so tests call them without a browser.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.analysis import patching
from inspector.analysis.attribution import attribute_step
from inspector.analysis.compare import compare
from inspector.analysis.records import commitment_layer
from inspector.errors import InputError
from inspector.generation import interventions as ivs
from inspector.generation.levers import Levers
from inspector.session.branches import BranchTree
from inspector.session.intervene import replay, rerun
from inspector.ui import model_thread
from inspector.ui.admission import admit_prompt
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.validate import Bound
from inspector.viz import interventions as viv
from inspector.viz.common import empty_figure, esc, show_piece, status_line_html

LAB = "interventions"
POINTS = {"head output (attn.hook_z)": "head", "attention output": "attn_out", "MLP output": "mlp_out",
          "block attention query → key": "block", "steer at resid_pre": "steer"}
OPS = ["zero", "scale", "mean"]
MAX_PATCH_TOKENS = 64  # a sweep costs layers x positions forwards' worth of blocks
PATCH_SHOW = 8  # tokens of a patched run shown


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "iv-status-line")


def _refused(message: str, *_: Any) -> tuple:
    return status_html(message, error=True), gr.skip(), gr.skip()


def _entry_session(ctx: TabContext, sid: str | None) -> tuple[Any, Any]:
    entry = ctx.store.get(sid)
    if entry is None or entry.session is None or not entry.session.records:
        raise InputError("nothing to change yet: press Prefill on the page first")
    return entry, entry.session


def _tree(entry: Any) -> BranchTree:
    s = entry.session
    if entry.branches is None:
        entry.branches = BranchTree(s.generated_ids, s.text, levers=s.levers)
    entry.branches.sync(s.generated_ids, s.text)
    return entry.branches


def branches_html(entry: Any) -> str:
    """The branches of the page's run: id, what it changed, its text; the one in use marked."""
    tree = entry.branches if entry is not None else None
    if tree is None:
        return "<div id='iv-branches' data-branches='1'>one branch: the run as sampled</div>"
    rows = []
    for b in tree.branches:
        what = b.label or ("as sampled" if b.at_step is None else f"step {b.at_step} ← {show_piece(b.forced_piece, 12)}")
        mark = " ◀ in use" if b.id == tree.current else ""
        rows.append(f"<div class='iv-branch' data-branch='{b.id}'><b>#{b.id}</b> {esc(what)}{mark}: "
                    f"<span class='ii-branch-text'>{esc(b.text[-80:])}</span></div>")
    return f"<div id='iv-branches' data-branches='{len(tree.branches)}'>{''.join(rows)}</div>"


def make_interventions(ctx: TabContext, session: Any, point: str, op: str, layer: Any, head: Any, factor: Any,
                       query: Any, key: Any, towards: Any, away: Any, alpha: Any) -> tuple:
    """The interventions the Apply controls describe (InputError naming what is allowed)."""
    cfg, tok = ctx.loaded.config, ctx.loaded.tokenizer
    kind = POINTS.get(point, point)
    if kind == "head":
        mean = None
        if op == "mean":
            mean = ivs.head_mean(ctx.loaded.model, session.prompt_ids, layer, head, session.levers)
        return ivs.head(cfg, layer, head, op, factor=factor, mean=mean)
    if kind in ("attn_out", "mlp_out"):
        return ivs.component(cfg, kind, layer, op, factor=factor)
    if kind == "block":
        return ivs.block_attention(cfg, query, key, layer)
    if kind == "steer":
        t, a = str(towards or "").strip(), str(away or "").strip()
        if not t or not a:
            raise InputError("steering needs two non-empty prompts: fill 'towards' and 'away'")
        vec = ivs.steering_vector(ctx.loaded.model, tok.encode(t), tok.encode(a), layer, session.levers)
        return ivs.steer(cfg, layer, vec, alpha)
    raise InputError(f"unknown point {point!r}: use one of {', '.join(POINTS)}")


def _apply_on_thread(ctx: TabContext, entry: Any, args: tuple) -> str:
    s = entry.session
    tree = _tree(entry)
    new = make_interventions(ctx, s, *args)
    levers = Levers(s.levers.processors, s.levers.cache_policy, s.levers.interventions + new)
    label = " + ".join(dict.fromkeys(iv.label for iv in new))
    rerun(s, levers)
    entry.preview = entry.uncached_ms = None
    b = tree.fork_levers(label, levers, s.generated_ids, s.text)
    return f"branch #{b.id}: {label} ({len(s.generated_ids)} tokens run again under it)"


@shows_refusals(_refused)
def apply(ctx: TabContext, sid: str | None, *args: Any) -> tuple:
    """Apply to this run: a new branch, the page's run under the branch in use's levers and this change."""
    entry, _ = _entry_session(ctx, sid)
    with entry.exclusive(LAB):
        message = model_thread.run(_apply_on_thread, ctx, entry, args)
    return status_html(message), branches_html(entry), run_text(entry)


def ablate_part(ctx: TabContext, sid: str | None, part: Any) -> tuple:
    """A click on a DLA bar: "head L.H" or "mlp L" -> zero it (as Apply)."""
    name, _, spec = str(part or "").strip().partition(" ")
    if name == "head":
        layer, _, head = spec.partition(".")
        return apply(ctx, sid, "head", "zero", layer, head, 0, 0, 0, "", "", 0)
    if name == "mlp":
        return apply(ctx, sid, "mlp_out", "zero", spec, 0, 0, 0, 0, "", "", 0)
    return status_html(f"only a head or an MLP can be ablated, got {str(part)[:40]!r}", error=True), gr.skip(), gr.skip()


def run_text(entry: Any) -> str:
    s = entry.session
    return (f"<div id='iv-run-text' data-generated='{len(s.generated_ids)}' style='white-space:pre-wrap'>"
            f"{esc(s.text)}</div>")


@shows_refusals(_refused)
def switch(ctx: TabContext, sid: str | None, branch: Any) -> tuple:
    """Make the page's run the chosen branch (its levers and tokens)."""
    entry, _ = _entry_session(ctx, sid)
    tree = _tree(entry)
    target = tree.get(int(Bound("branch", True, 0, len(tree) - 1).parse(branch)))
    with entry.exclusive(LAB):
        model_thread.run(replay, entry.session, target.levers or Levers(), target.generated_ids)
    tree.current = target.id
    entry.preview = entry.uncached_ms = None
    return status_html(f"switched to branch #{target.id}"), branches_html(entry), run_text(entry)


@shows_refusals(_refused)
def compare_branches(ctx: TabContext, sid: str | None, a: Any, b: Any) -> tuple:
    """Two branches side by side (replayed in sessions of their own)."""
    entry, s = _entry_session(ctx, sid)
    tree = _tree(entry)
    ids = [int(Bound(f"branch {n}", True, 0, len(tree) - 1).parse(v)) for n, v in (("A", a), ("B", b))]
    ba, bb = tree.get(ids[0]), tree.get(ids[1])
    params = s.records[-1].sample.params
    side = [(f"#{x.id} {x.label or ('as sampled' if x.at_step is None else f'step {x.at_step} forced')}",
             x.levers or Levers(), x.generated_ids) for x in (ba, bb)]
    with entry.exclusive(LAB):
        c = model_thread.run(compare, ctx.loaded, s.prompt_ids, params, *side, max_new_tokens=s.max_new_tokens)
    return status_html(f"compared #{ba.id} and #{bb.id}"), viv.compare_html(c), viv.resid_diff_figure(c)


def _attribution_views(entry: Any, step: int) -> tuple[str, str]:
    s = entry.session
    a = attribute_step(s, step)
    layers = []
    for k in range(len(s.records)):
        lens = s.logit_lens(k) if s.record else []
        layers.append(commitment_layer([row[0].id for row in lens]) if lens else None)
    strip = viv.commitment_strip_html(s.tokenizer.pieces(s.generated_ids), layers, s.config.num_hidden_layers)
    return viv.dla_html(a), strip


@shows_refusals(_refused)
def attribution(ctx: TabContext, sid: str | None, step: Any) -> tuple:
    """The DLA bars of one step (-1: the newest) and the commitment layer of every step."""
    entry, s = _entry_session(ctx, sid)
    k = int(Bound("step", True, -1, len(s.generated_ids) - 1, note="(-1 = the newest)").parse(step))
    k = len(s.generated_ids) - 1 if k < 0 else k
    with entry.exclusive(LAB):
        bars, strip = model_thread.run(_attribution_views, entry, k)
    return status_html(f"attribution of step {k}"), bars, strip


def _token(ctx: TabContext, text: Any, what: str) -> int:
    text = str(text or "")
    ids = ctx.loaded.tokenizer.encode(text) if text else []
    if len(ids) != 1:
        raise InputError(f"the {what} token must be exactly one token, {text!r} is {len(ids)}: a word's token "
                         "usually starts with a space")
    return ids[0]


@shows_refusals(_refused)
def patch_sweep(ctx: TabContext, sid: str | None, clean: Any, corrupt: Any, answer: Any, wrong: Any,
                point: Any) -> tuple:
    """The layer x position sweep of the page's model (no running session needed)."""
    c = admit_prompt(ctx.loaded, ctx.limits, clean, False, None).ids
    r = admit_prompt(ctx.loaded, ctx.limits, corrupt, False, None).ids
    if max(len(c), len(r)) > MAX_PATCH_TOKENS:
        raise InputError(f"patching prompts may be up to {MAX_PATCH_TOKENS} tokens here, got {max(len(c), len(r))}")
    if point not in patching.POINTS:
        raise InputError(f"unknown patching point {point!r}: use one of {', '.join(patching.POINTS)}")
    a, w = _token(ctx, answer, "answer"), _token(ctx, wrong, "wrong")
    tok = ctx.loaded.tokenizer
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        s = model_thread.run_prefill(patching.sweep, ctx.loaded.model, c, r, a, w, point,
                                     pieces=(tok.pieces(c), tok.pieces(r)))
        state["patch"] = (c, r, a, w, point)
    return status_html(f"patched {len(s.layers)} layers x {len(s.positions)} positions in {s.seconds:.1f} s"), \
        viv.patch_table_html(s), "<div id='iv-patched-run'></div>"


def _patched_run(ctx: TabContext, args: tuple, layer: int, position: int) -> str:
    c, r, a, w, point = args
    tok = ctx.loaded.tokenizer
    return viv.patched_run_html(patching.patched_run(ctx.loaded.model, c, r, a, w, point, layer, position,
                                                     piece=tok.piece, decode=tok.decode, n=PATCH_SHOW))


@shows_refusals(_refused)
def patched_cell(ctx: TabContext, sid: str | None, cell: Any) -> tuple:
    """A click on a patching cell "L:p": that patched run's next tokens and greedy continuation."""
    entry, state = lab_state(ctx, sid, LAB)
    if "patch" not in state:
        raise InputError("run a patching sweep first")
    layer, _, position = str(cell or "").partition(":")
    cfg = ctx.loaded.config
    L = ivs.check_layer(cfg, layer)
    p = int(Bound("position", True, 0, len(state["patch"][1]) - 1).parse(position))
    with entry.exclusive(LAB):
        html = model_thread.run(_patched_run, ctx, state["patch"], L, p)
    return status_html(f"patched run at layer {L}, position {p}"), gr.skip(), html


def build_interventions_tab(ctx: TabContext) -> None:
    fast = {"show_progress": "hidden", "api_visibility": "undocumented"}
    cfg = ctx.loaded.config
    with gr.Tab("Interventions", elem_id="tab-interventions"):
        gr.Markdown("Change the model while it generates: switch off a head, an attention or MLP output, block "
                    "attention from one position to another, or steer the residual stream. Each change runs the "
                    "page's prompt again under it and makes a branch; compare branches, see which heads and MLPs "
                    "wrote a token's logit, and patch activations from a clean prompt into a corrupted one.",
                    elem_classes="ii-caption")
        status = gr.HTML(status_html("press Prefill on the page, then apply an intervention"), elem_id="iv-status")
        with gr.Row():
            point = gr.Dropdown(list(POINTS), value=next(iter(POINTS)), label="point", elem_id="iv-point")
            op = gr.Dropdown(OPS, value="zero", label="operation", elem_id="iv-op")
            layer = gr.Textbox("0", label=f"layer (0-{cfg.num_hidden_layers - 1})", elem_id="iv-layer")
            head = gr.Textbox("0", label=f"head (0-{cfg.num_attention_heads - 1})", elem_id="iv-head")
            factor = gr.Textbox("0.5", label="scale factor", elem_id="iv-factor")
        with gr.Row():
            query = gr.Textbox("1", label="query position (block)", elem_id="iv-query")
            key = gr.Textbox("0", label="key position (block)", elem_id="iv-key")
            towards = gr.Textbox("love", label="steer towards", elem_id="iv-towards")
            away = gr.Textbox("hate", label="steer away from", elem_id="iv-away")
            alpha = gr.Textbox("4.0", label="steering α", elem_id="iv-alpha")
        with gr.Row():
            apply_btn = gr.Button("Apply to this run", variant="primary", elem_id="iv-apply")
            branch_no = gr.Textbox("0", label="branch", elem_id="iv-branch")
            switch_btn = gr.Button("Switch to branch", elem_id="iv-switch")
        branches = gr.HTML(branches_html(None), elem_id="iv-branches-box")
        text = gr.HTML("<div id='iv-run-text'></div>", elem_id="iv-run")
        with gr.Accordion("Compare two branches", open=True):
            with gr.Row():
                a = gr.Textbox("0", label="branch A", elem_id="iv-cmp-a")
                b = gr.Textbox("1", label="branch B", elem_id="iv-cmp-b")
                cmp_btn = gr.Button("Compare", elem_id="iv-compare")
            cmp_html = gr.HTML("", elem_id="iv-compare-view")
            cmp_fig = gr.Plot(empty_figure("The residual difference per layer appears here"), show_label=False,
                              elem_id="iv-compare-fig")
        with gr.Accordion("Direct logit attribution and commitment layer", open=True):
            with gr.Row():
                step = gr.Textbox("-1", label="step (-1 = newest)", elem_id="iv-step")
                dla_btn = gr.Button("Attribute", elem_id="iv-attribute")
            dla = gr.HTML("", elem_id="iv-dla")
            strip = gr.HTML("", elem_id="iv-commitment")
            part = gr.Textbox(elem_id="iv-part-request", elem_classes="ii-offscreen", container=False)
        with gr.Accordion("Activation patching", open=False):
            with gr.Row():
                clean = gr.Textbox("When Mary and John went to the store, John gave a drink to", label="clean prompt",
                                   elem_id="iv-clean")
                corrupt = gr.Textbox("When Mary and John went to the store, Mary gave a drink to",
                                     label="corrupted prompt (same token length)", elem_id="iv-corrupt")
            with gr.Row():
                answer = gr.Textbox(" Mary", label="answer token", elem_id="iv-answer")
                wrong = gr.Textbox(" John", label="wrong token", elem_id="iv-wrong")
                ppoint = gr.Dropdown(list(patching.POINTS), value="resid_pre", label="point", elem_id="iv-patch-point")
                patch_btn = gr.Button("Patch every layer × position", elem_id="iv-patch")
            table = gr.HTML("", elem_id="iv-patch-table")
            patched = gr.HTML("<div id='iv-patched-run'></div>", elem_id="iv-patched")
            cell = gr.Textbox(elem_id="iv-cell-request", elem_classes="ii-offscreen", container=False)

    run_outs = [status, branches, text]
    apply_btn.click(lambda sid, *v: apply(ctx, sid, *v),
                    [ctx.sid, point, op, layer, head, factor, query, key, towards, away, alpha], run_outs, **fast)
    part.input(lambda sid, v: ablate_part(ctx, sid, v), [ctx.sid, part], run_outs, **fast)
    switch_btn.click(lambda sid, v: switch(ctx, sid, v), [ctx.sid, branch_no], run_outs, **fast)
    cmp_btn.click(lambda sid, x, y: compare_branches(ctx, sid, x, y), [ctx.sid, a, b], [status, cmp_html, cmp_fig], **fast)
    dla_btn.click(lambda sid, k: attribution(ctx, sid, k), [ctx.sid, step], [status, dla, strip], **fast)
    patch_btn.click(lambda sid, *v: patch_sweep(ctx, sid, *v), [ctx.sid, clean, corrupt, answer, wrong, ppoint],
                    [status, table, patched], **fast)
    cell.input(lambda sid, v: patched_cell(ctx, sid, v), [ctx.sid, cell], [status, table, patched], **fast)
