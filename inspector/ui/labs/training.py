"""The Training lab: a known text teacher-forced through the page's model, and one backward pass.

The tab lays out a text box (filled, when the tab opens and the box is empty, with the current run's text,
prompt + generated with the chat template's tokens, or else the page's prompt; the "Use the current run's
text" button refills it; Run with the box empty uses that text), Run, and the views of
`inspector.viz.training`: the per-token loss coloured on the tokens, mean loss and perplexity; the gradient
norm per layer and per layer and weight; the weights outside the layers; memory of inference beside one
training step.

Run checks the text's length first (characters, then tokens: at most `MAX_TOKENS`, the backward keeps every
position's activations), then reserves the step's memory for the server (`admission.reserved`: its
gradients and activations, `estimated_step_nbytes`; refused in one line when the server is full) and runs
`inspector.analysis.training.training_step` on the prefill thread (which holds the model lock, so the shared
model's temporary `requires_grad` is never seen by another forward) under this browser's lock. Nothing is
kept between runs: the memory is held only while a step runs.
"""

from __future__ import annotations

from typing import Any

from inspector.analysis.training import check_text, estimated_step_nbytes, training_step
from inspector.errors import InputError
from inspector.ui import model_thread
from inspector.ui.admission import MAX_CHARS_PER_TOKEN, reserved
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel
from inspector.ui.refusals import refuses
from inspector.viz import training as vt
from inspector.viz.common import empty_figure

MAX_TOKENS = 256  # the backward keeps every position's activations (~0.4 GB at 256 tokens on SmolLM2-135M)


class TrainingLab(Panel):
    key, title, tab_id = "training", "Training", "tab-training"
    status_id = "training-status-line"

    def current_text(self, sid: str | None, prompt: Any) -> str:
        """The browser's current run as text (prompt + generated, special tokens included), else the page's prompt."""
        visitor = self.page.store.get(sid)
        session = visitor.session if visitor is not None else None
        ids = list(getattr(session, "prompt_ids", []) or []) + list(getattr(session, "generated_ids", []) or [])
        if ids:
            return self.page.loaded.tokenizer.decode(ids)
        return prompt if isinstance(prompt, str) else ""

    def use_run(self, sid: str | None, prompt: Any) -> dict[str, Any]:
        """The button "Use the current run's text"."""
        return {"text": self.current_text(sid, prompt)}

    def fill_if_empty(self, sid: str | None, text: Any, prompt: Any) -> dict[str, Any]:
        """Opening the tab: the current run's text (else the page's prompt) in an empty box; a typed text stays,
        and nothing is written when there is nothing to fill (a reply to an earlier open must not blank the box)."""
        if isinstance(text, str) and text.strip():
            return {}
        default = self.current_text(sid, prompt)
        return {"text": default} if default.strip() else {}

    def admit_text(self, text: Any) -> list[int]:
        """The text's ids after every cap (characters before tokenizing); InputError naming what is allowed."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("the text is empty: type a text, or a prompt on the page")
        if len(text) > MAX_TOKENS * MAX_CHARS_PER_TOKEN:
            raise InputError(f"the text is {len(text)} characters; this view teacher-forces at most {MAX_TOKENS} "
                             f"tokens ({MAX_TOKENS * MAX_CHARS_PER_TOKEN} characters): shorten it")
        loaded = self.page.loaded
        ids = loaded.tokenizer.prompt_ids(text, False)
        check_text(ids, loaded.config.max_position_embeddings, MAX_TOKENS)
        return ids

    def placeholders(self, message: str) -> dict[str, Any]:
        return {"status": self.status(message), "summary": "", "tokens": "",
                "layers": empty_figure("Gradient norms per layer appear after Run"),
                "weights": empty_figure("Gradient norms per weight appear after Run"), "outside": "", "memory": "",
                "memory_fig": empty_figure("Memory of inference and a training step appears after Run")}

    def layout(self) -> None:
        import gradio as gr

        gr.Markdown(vt.CAPTION, elem_classes="ii-caption", elem_id="training-caption")
        self.show("text", gr.Textbox("", lines=4, max_lines=10, label=f"text to teacher-force (at most {MAX_TOKENS} "
                                     "tokens)", placeholder="the current run's text, or the page's prompt",
                                     elem_id="training-text"))
        with gr.Row():
            self.use_btn = gr.Button("Use the current run's text", elem_id="training-use-run")
            self.run_btn = gr.Button("Run forward + backward", variant="primary", elem_id="training-run")
        blank = self.placeholders("Run teacher-forces the text: a loss per token, then one backward pass")
        self.show("status", gr.HTML(blank["status"], elem_id="training-status"))
        self.show("summary", gr.HTML(blank["summary"], elem_id="training-summary"))
        self.show("tokens", gr.HTML(blank["tokens"], elem_id="training-tokens"))
        with gr.Row():
            self.show("layers", Figure(blank["layers"], elem_id="training-layer-norms", show_label=False))
            self.show("weights", Figure(blank["weights"], elem_id="training-weight-norms", show_label=False))
        self.show("outside", gr.HTML(blank["outside"], elem_id="training-outside-layers"))
        self.show("memory", gr.HTML(blank["memory"], elem_id="training-memory-table"))
        self.show("memory_fig", Figure(blank["memory_fig"], elem_id="training-memory-figure", show_label=False))

    def wire(self) -> None:
        p = self.page
        text = self.outputs["text"]
        self.on(self.tab.select, self.fill_if_empty, [p.sid, text, p.prompt], ["text"])
        self.on(self.use_btn.click, self.use_run, [p.sid, p.prompt], ["text"])
        self.on(self.run_btn.click, self.train, [p.sid, text, p.prompt],
                ["status", "summary", "tokens", "layers", "weights", "outside", "memory", "memory_fig"],
                show_progress="minimal", concurrency_limit=1)

    @refuses
    def train(self, sid: str | None, text: Any, prompt: Any = None) -> dict[str, Any]:
        """Run: caps first, then one forward and backward over the text (an empty box: the current run's text,
        else the page's prompt); every view of the tab."""
        if not (isinstance(text, str) and text.strip()):
            text = self.current_text(sid, prompt)
        ids = self.admit_text(text)
        loaded, store = self.page.loaded, self.page.store
        tok = loaded.tokenizer
        need = estimated_step_nbytes(loaded.config, self.page.inventory.params, len(ids))
        _, visitor = store.get_or_create(sid)
        with visitor.exclusive(self.key), reserved(store, self.page.limits, self.key, need):
            step = model_thread.call_prefill(training_step, loaded.model, ids, tok.pieces(ids), MAX_TOKENS)
        return {"status": self.status(f"{len(ids)} tokens teacher-forced, one backward pass (no weight changed)"),
                "summary": vt.summary_html(step), "tokens": vt.tokens_html(step),
                "layers": vt.layer_norms_figure(step), "weights": vt.weight_norms_figure(step),
                "outside": vt.outside_layers_html(step), "memory": vt.memory_html(step),
                "memory_fig": vt.memory_figure(step)}
