"""The Speculative lab: speculative decoding on the page's model, one round at a time or played.

The tab lays out the drafter (prompt lookup `ngram`, or `early-exit` with its layer L), the draft length k,
Start / Round / Play / Pause, and the views of `inspector.viz.speculative`: each round's drafts with q and p
(kept, rejected struck through, the corrected or bonus token), the KV cache writing k+1 entries and cutting
back, and the running numbers. When a run finishes, a plain greedy decode of the same prompt and length is
timed on the same model thread, for the speedup.

Start uses the page's prompt, chat toggle, system prompt, sampling controls and max new tokens, and checks
every cap before any model work (`admit_prompt`, `admit_max_new`, the run's memory with the session's
others: `admit_memory`). The `SpeculativeDecoder` is this panel's state (its caches counted by `nbytes`). The
prefill runs on the prefill thread, rounds and the plain decode on the decode thread, all under the visitor's
lock; Play holds it until it stops (`inspector.ui.play`), and Pause stops it after the current round.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.speculative.decoding import SpeculativeDecoder, check_draft_len, plain_decode
from inspector.speculative.drafters import make_drafter
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_memory, admit_prompt, draft_layers, \
    estimated_speculative_nbytes
from inspector.ui.fields import DRAFT_LEN, early_exit_bound, report_on_release, sampling_params, slider
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel, PanelState
from inspector.ui.play import play_steps
from inspector.ui.refusals import refuses
from inspector.viz import speculative as vsp
from inspector.viz.common import empty_figure, esc

DRAFTERS = ["ngram", "early-exit"]


@dataclass
class SpeculativeState(PanelState):
    run: SpeculativeDecoder | None = None

    def nbytes(self) -> int:
        """The target's KV cache and, for an early-exit drafter, the drafter's (as allocated)."""
        if self.run is None:
            return 0
        drafter_cache = getattr(self.run.drafter, "cache", None)
        return self.run.cache.allocated_nbytes + (drafter_cache.allocated_nbytes if drafter_cache else 0)


def drafter_spec(drafter: Any, layer: Any, config: Any) -> str:
    """The dropdown and layer slider as a drafter name (`ngram` or `early-exit:L`)."""
    if drafter == "early-exit":
        return f"early-exit:{early_exit_bound(config).parse(layer)}"
    return str(drafter)


def one_round(run: SpeculativeDecoder) -> str:
    """One round, and the plain-decode timing once the run has finished (call it on the decode thread)."""
    r = run.round()
    if run.finished and run.stats.plain is None and run.stats.tokens:
        _, run.stats.plain = plain_decode(run.model, run.prompt_ids, run.stats.tokens)
    what = {"corrected": "corrected", "bonus": "bonus", "plain": "no drafts", "none": "ended"}[r.next_kind]
    done = f"; finished ({run.finished})" if run.finished else ""
    return f"round {r.index + 1}: kept {r.accepted} of {r.drafted} drafts, {what}{done}"


class SpeculativeLab(Panel):
    key, title, tab_id = "speculative", "Speculative", "tab-speculative"
    status_id = "spec-status-line"
    State = SpeculativeState

    def views(self, run: SpeculativeDecoder | None, message: str, error: bool = False) -> dict[str, Any]:
        """Every output: the status, the text, the rounds, the KV cache per round, the numbers."""
        if run is None:
            return {"status": self.status(message, error), "text": '<div id="spec-text"></div>',
                    "rounds": vsp.rounds_html([]), "kv": empty_figure("The KV cache per round appears here"),
                    "stats": vsp.stats_html(None)}
        text = (f'<div id="spec-text" style="white-space:pre-wrap;font-family:monospace" '
                f'data-generated="{len(run.generated_ids)}" data-finished="{run.finished or ""}">'
                f"{esc(run.text)}</div>")
        return {"status": self.status(message, error), "text": text, "rounds": vsp.rounds_html(run.rounds),
                "kv": vsp.kv_figure(run.rounds), "stats": vsp.stats_html(run.stats)}

    def layout(self) -> None:
        import gradio as gr

        config = self.page.loaded.config
        n_layers = config.num_hidden_layers
        gr.Markdown(vsp.CAPTION + " Uses the page's prompt, chat toggle, sampling controls and max new tokens.",
                    elem_classes="ii-caption")
        with gr.Row():
            self.drafter = gr.Dropdown(DRAFTERS, value="ngram", label="drafter (ngram = prompt lookup)",
                                       elem_id="speculative-drafter")
            # a slider needs min < max: a 2-layer model shows 1..2, and 2 is refused in one line
            self.layer = slider(early_exit_bound(config), max(1, min(n_layers - 1, round(0.8 * n_layers))), 1,
                                "early-exit layer L (draft with the first L layers)", "speculative-layer")
            self.k = slider(DRAFT_LEN, 5, 1, "draft length k", "speculative-k")
        with gr.Row():
            self.start_btn = gr.Button("Start", variant="primary", elem_id="speculative-start")
            self.round_btn = gr.Button("Round →", elem_id="speculative-round")
            self.play_btn = gr.Button("Play ▶", elem_id="speculative-play")
            self.pause_btn = gr.Button("Pause", elem_id="speculative-pause")
        blank = self.views(None, "press Start to prefill the prompt")
        self.show("status", gr.HTML(blank["status"], elem_id="speculative-status"))
        self.show("text", gr.HTML(blank["text"], elem_id="speculative-text"))
        with gr.Row():
            with gr.Column(scale=3):
                self.show("rounds", gr.HTML(blank["rounds"], elem_id="speculative-rounds"))
            with gr.Column(scale=2):
                self.show("stats", gr.HTML(blank["stats"], elem_id="speculative-stats"))
        self.show("kv", Figure(blank["kv"], elem_id="speculative-kv", show_label=False))

    def wire(self) -> None:
        p = self.page
        status = self.outputs["status"]
        report_on_release(self.layer, early_exit_bound(p.loaded.config), status, self.status)
        report_on_release(self.k, DRAFT_LEN, status, self.status)
        self.on(self.start_btn.click, self.start, [p.sid, self.drafter, self.layer, self.k, p.prompt, p.chat, p.system,
                                                   p.max_new, *p.sampling])
        self.on(self.round_btn.click, self.round, [p.sid])
        self.on(self.play_btn.click, self.play, [p.sid])
        self.on(self.pause_btn.click, self.pause, [p.sid], [], queue=False)

    @refuses
    def start(self, sid: str | None, drafter: Any, layer: Any, k: Any, prompt: Any, chat: Any, system: Any,
              max_new: Any, *sampling: Any) -> dict[str, Any]:
        """A new run: every cap first, then the prefill (token 1) on the prefill thread."""
        loaded, limits = self.page.loaded, self.page.limits
        params = sampling_params(*sampling)
        max_new = admit_max_new(max_new, limits)
        k = DRAFT_LEN.parse(k)
        spec = drafter_spec(drafter, layer, loaded.config)
        admitted = admit_prompt(loaded, limits, prompt, bool(chat), system)
        check_draft_len(k, len(admitted.ids), loaded.config.max_position_embeddings)
        drafter = make_drafter(spec, loaded.model)
        elem = loaded.dtype.itemsize
        admit_memory(self.page.store, sid, limits, self.key, estimated_speculative_nbytes(
            loaded.config, elem, len(admitted.ids), max_new, draft_layers(drafter)))
        run = SpeculativeDecoder(loaded, drafter, k, params, max_new_tokens=max_new)
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            state.run = None  # drop the previous run (and its caches) first
            model_thread.call_prefill(run.prefill, admitted.ids)
            state.run = run
        return self.views(run, f"prefill done ({len(admitted.ids)} prompt tokens): press Round or Play")

    def need_run(self, sid: str | None) -> tuple[Any, SpeculativeDecoder]:
        state = self.kept(sid)
        run = state.run if state is not None else None
        if run is None:
            raise InputError("nothing to run yet: press Start first")
        if run.finished:
            raise InputError(f"the run has finished ({run.finished}): press Start to begin again")
        return self.page.store.get(sid), run

    @refuses
    def round(self, sid: str | None) -> dict[str, Any]:
        """The Round button: draft, verify in one forward, accept, roll back."""
        visitor, run = self.need_run(sid)
        with visitor.exclusive(self.key):
            message = model_thread.call(one_round, run)
        return self.views(run, message)

    @refuses
    def play(self, sid: str | None) -> Iterator[dict[str, Any]]:
        """Rounds until the run finishes or Pause is pressed, the views after each round."""
        visitor, run = self.need_run(sid)
        said = [""]

        def advance() -> bool:
            said[0] = model_thread.call(one_round, run)
            return not run.finished

        for _ in play_steps(visitor, advance):
            yield self.views(run, "playing — " + said[0])
        yield self.views(run, ("paused after " if visitor.pause.is_set() and not run.finished else "") + said[0])
