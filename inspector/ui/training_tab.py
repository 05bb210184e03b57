"""The Training tab: a known text teacher-forced through the page's model, and one backward pass.

`build_training_tab(ctx)` lays out a text box (filled, when the tab opens and the box is empty, with the
current run's text, prompt + generated with the chat template's tokens, or else the page's prompt; the
"Use the current run's text" button refills it; Run with the box empty uses that text), Run, and the
views of `inspector.viz.training`: the per-token loss coloured on the tokens, mean loss and perplexity;
the gradient norm per layer and per layer and weight; the weights outside the layers; memory of
inference beside one training step.

Run checks the text's length first (characters, then tokens: at most `MAX_TOKENS`, the backward keeps
every position's activations), then runs `inspector.analysis.training.training_step` on the prefill thread
(which holds the model lock, so the shared model's temporary `requires_grad` is never seen by another
forward) under this browser's lock. Nothing is kept between runs. Bad input is one line in the status.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gradio as gr

from inspector.analysis.training import check_text, training_step
from inspector.errors import InputError
from inspector.ui import model_thread
from inspector.ui.admission import MAX_CHARS_PER_TOKEN
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.viz import training as vt
from inspector.viz.common import empty_figure, status_line_html

LAB = "training"
MAX_TOKENS = 256  # the backward keeps every position's activations (~1 GB at 256 tokens on SmolLM2-135M)


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "training-status-line")


def current_text(ctx: TabContext, sid: str | None, prompt: Any) -> str:
    """The browser's current run as text (prompt + generated, special tokens included), else the page's prompt."""
    entry = ctx.store.get(sid)
    session = entry.session if entry is not None else None
    ids = list(getattr(session, "prompt_ids", []) or []) + list(getattr(session, "generated_ids", []) or [])
    if ids:
        return ctx.loaded.tokenizer.decode(ids)
    return prompt if isinstance(prompt, str) else ""


def fill_if_empty(ctx: TabContext, sid: str | None, text: Any, prompt: Any) -> Any:
    """Opening the tab: the current run's text (else the page's prompt) in an empty box; a typed text stays,
    and nothing is written when there is nothing to fill (a reply to an earlier open must not blank the box)."""
    if isinstance(text, str) and text.strip():
        return gr.skip()
    default = current_text(ctx, sid, prompt)
    return default if default.strip() else gr.skip()


def admit_text(ctx: TabContext, text: Any) -> list[int]:
    """The text's ids after every cap (characters before tokenizing); InputError naming what is allowed."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the text is empty: type a text, or a prompt on the page")
    if len(text) > MAX_TOKENS * MAX_CHARS_PER_TOKEN:
        raise InputError(f"the text is {len(text)} characters; this view teacher-forces at most {MAX_TOKENS} tokens "
                         f"({MAX_TOKENS * MAX_CHARS_PER_TOKEN} characters): shorten it")
    ids = ctx.loaded.tokenizer.prompt_ids(text, False)
    check_text(ids, ctx.loaded.config.max_position_embeddings, MAX_TOKENS)
    return ids


def placeholders(message: str, error: bool = False) -> tuple:
    return (status_html(message, error), "", "", empty_figure("Gradient norms per layer appear after Run"),
            empty_figure("Gradient norms per weight appear after Run"), "", "",
            empty_figure("Memory of inference and a training step appears after Run"))


@shows_refusals(lambda message, *_: (status_html(message, error=True), *(gr.skip(),) * 7))
def run_training(ctx: TabContext, sid: str | None, text: Any, prompt: Any = None) -> tuple:
    """Run: caps first, then one forward and backward over the text (an empty box: the current run's text,
    else the page's prompt); every view of the tab."""
    if not (isinstance(text, str) and text.strip()):
        text = current_text(ctx, sid, prompt)
    ids = admit_text(ctx, text)
    tok = ctx.loaded.tokenizer
    entry, _ = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        step = model_thread.run_prefill(training_step, ctx.loaded.model, ids, tok.pieces(ids), MAX_TOKENS)
    return (status_html(f"{len(ids)} tokens teacher-forced, one backward pass (no weight changed)"),
            vt.summary_html(step), vt.tokens_html(step), vt.layer_norms_figure(step), vt.weight_norms_figure(step),
            vt.outside_layers_html(step), vt.memory_html(step), vt.memory_figure(step))


def build_training_tab(ctx: TabContext) -> None:
    with gr.Tab("Training", elem_id="tab-training") as tab:
        gr.Markdown(vt.CAPTION, elem_classes="ii-caption", elem_id="training-caption")
        text = gr.Textbox("", lines=4, max_lines=10, label=f"text to teacher-force (at most {MAX_TOKENS} tokens)",
                          placeholder="the current run's text, or the page's prompt", elem_id="training-text")
        with gr.Row():
            use_run = gr.Button("Use the current run's text", elem_id="training-use-run")
            run_btn = gr.Button("Run forward + backward", variant="primary", elem_id="training-run")
        blank = placeholders("Run teacher-forces the text: a loss per token, then one backward pass")
        status = gr.HTML(blank[0], elem_id="training-status")
        summary = gr.HTML(blank[1], elem_id="training-summary")
        tokens = gr.HTML(blank[2], elem_id="training-tokens")
        with gr.Row():
            layers = gr.Plot(blank[3], elem_id="training-layer-norms", show_label=False)
            weights = gr.Plot(blank[4], elem_id="training-weight-norms", show_label=False)
        outside = gr.HTML(blank[5], elem_id="training-outside-layers")
        memory = gr.HTML(blank[6], elem_id="training-memory-table")
        memory_fig = gr.Plot(blank[7], elem_id="training-memory-figure", show_label=False)
    fast = {"show_progress": "hidden", "api_visibility": "undocumented"}
    tab.select(partial(fill_if_empty, ctx), [ctx.sid, text, ctx.prompt], [text], concurrency_limit=None, **fast)
    use_run.click(partial(current_text, ctx), [ctx.sid, ctx.prompt], [text], concurrency_limit=None, **fast)
    run_btn.click(partial(run_training, ctx), [ctx.sid, text, ctx.prompt],
                  [status, summary, tokens, layers, weights, outside, memory, memory_fig],
                  show_progress="minimal", api_visibility="undocumented")
