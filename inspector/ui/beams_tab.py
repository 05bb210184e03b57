"""The Beams lab tab: beam search on the page's prompt, drawn as a tree that grows step by step.

`build_beams_tab(ctx, controls)` lays out Run, a step slider and the views of `inspector.viz.beams`: every
candidate each live beam spawned (by step and rank, with its cumulative log-probability), which survived
as a live beam, which finished, the chosen output highlighted; and the finished hypotheses with their
scores. Beam count, length penalty and the penalties and bans come from the decoding controls of the
page's sampling settings panel (`inspector.ui.decoding_controls`); prompt, chat toggle, system prompt and
max new tokens from the page. Every cap is checked before model work; the search runs on the decode
thread under the entry's lock; bad input is one line in the tab's status. Handlers are module functions,
so tests call them without a browser.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.generation.beam import beam_search
from inspector.generation.decoding import decoding_processors
from inspector.generation.levers import Levers
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_prompt
from inspector.ui.decoding_controls import DecodingControls, settings_from_controls
from inspector.ui.fields import slider
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.validate import Bound
from inspector.viz import beams as vbm
from inspector.viz.common import empty_figure, status_line_html

LAB = "beams"
CAPTION = ("Beam search keeps the B most likely continuations at each step instead of one token: each live beam "
           "spawns candidates, the best B that have not ended live on, those that end with EOS (or at the length "
           "limit) become finished hypotheses, ranked by log-probability / length^length-penalty (the transformers "
           "defaults). Set the beams and length penalty in the page's settings panel.")


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "beams-status-line")


def _search(ctx: TabContext, ids: list[int], settings: Any, max_new: int) -> Any:
    tok, loaded = ctx.loaded.tokenizer, ctx.loaded
    eos = sorted(loaded.stop_ids)
    procs = decoding_processors(settings, len(ids), tok, eos, loaded.config.vocab_size)
    return beam_search(loaded.model, ids, settings.num_beams, max_new, eos_ids=eos,
                       length_penalty=settings.length_penalty, levers=Levers(processors=procs), piece=tok.piece,
                       decode=lambda t: tok.decode([i for i in t if i not in loaded.stop_ids]))


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip(), gr.skip(), gr.skip()))
def run(ctx: TabContext, sid: str | None, prompt: Any, chat: Any, system: Any, max_new: Any, *decoding: Any) -> tuple:
    """Run button: the whole search, then the tree and the hypotheses (status, tree, slider, table)."""
    settings = settings_from_controls(*decoding, for_beams=True)
    if settings.num_beams < 2:
        raise InputError("beams must be at least 2 for beam search: set beams in the settings panel")
    max_new = admit_max_new(max_new, ctx.limits)
    admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        state.clear()
        rec = model_thread.run(_search, ctx, admitted.ids, settings, max_new)
        state["record"] = rec
    best = rec.hypotheses[0]
    n = len(rec.steps)
    return (status_html(f"{rec.num_beams} beams, {n} steps: best score {best.score:.3f}, "
                        f"{len(best.token_ids)} tokens, finished: {rec.finish}"),
            vbm.beam_tree(rec), gr.update(maximum=max(1, n), value=n, interactive=True), vbm.beam_table_html(rec))


def step_bound(n_steps: int) -> Bound:
    return Bound("tree after step", True, 1, max(1, n_steps))


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip()))
def show_step(ctx: TabContext, sid: str | None, step: Any) -> tuple:
    """The slider: the tree as it stood after that step (the last step: the whole tree, chosen output lit);
    a value outside the steps is refused by name (status, tree)."""
    entry = ctx.store.get(sid)
    rec = entry.labs.get(LAB, {}).get("record") if entry is not None else None
    if rec is None:
        raise InputError("nothing to show yet: press Run beam search first")
    k = step_bound(len(rec.steps)).parse(step)
    tree = vbm.beam_tree(rec) if k >= len(rec.steps) else vbm.beam_tree(rec, upto=max(0, k - 1))
    return status_html(f"the tree after step {k} of {len(rec.steps)}"), tree


def build_beams_tab(ctx: TabContext, controls: DecodingControls) -> None:
    fast = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
    with gr.Tab("Beams", elem_id="tab-beams"):
        gr.Markdown(CAPTION, elem_classes="ii-caption")
        run_btn = gr.Button("Run beam search", variant="primary", elem_id="beams-run")
        status = gr.HTML(status_html("press Run beam search (uses the page's prompt)"), elem_id="beams-status")
        step = slider(step_bound(2), 2, 1, "tree after step", "beams-step", interactive=False)
        tree = gr.Plot(empty_figure("The beam tree appears here"), elem_id="beams-tree", show_label=False)
        table = gr.HTML("", elem_id="beams-table")
    run_btn.click(lambda sid, *a: run(ctx, sid, *a),
                  [ctx.sid, ctx.prompt, ctx.chat, ctx.system, ctx.max_new, *controls.inputs],
                  [status, tree, step, table], **fast)
    step.release(lambda sid, k: show_step(ctx, sid, k), [ctx.sid, step], [status, tree], trigger_mode="always_last",
                 **fast)
