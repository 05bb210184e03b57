"""The Speculative lab tab: speculative decoding on the page's model, one round at a time or played.

`build_speculative_tab(ctx)` lays out the drafter (prompt lookup `ngram`, or `early-exit` with its layer L),
the draft length k, Start / Round / Play / Pause, and the views of `inspector.viz.speculative`: each round's
drafts with q and p (kept, rejected struck through, the corrected or bonus token), the KV cache writing k+1
entries and cutting back, and the running numbers. When a run finishes, a plain greedy decode of the same
prompt and length is timed on the same model thread, for the speedup.

Start uses the page's prompt, chat toggle, system prompt, sampling controls and max new tokens, and checks
every cap before any model work (`admit_prompt`, `admit_max_new`: max new tokens within max_steps). The
`SpeculativeRun` lives in this browser session's lab state (`lab_state(ctx, sid, "speculative")`), freed with
the session. The prefill runs on the prefill thread, rounds and the plain decode on the decode thread, all
under the entry's lock; Play holds it until it stops, and Pause (`entry.pause`) stops it after the current
round. Handlers are module functions of (ctx, ...), so tests call them without a browser; bad input is one
line in the tab's status, never an exception (`shows_refusals`); the layer and k boxes parse through
`inspector.ui.fields`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.speculative.decoding import SpeculativeRun, check_draft_len, plain_decode
from inspector.speculative.drafters import make_drafter
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_prompt
from inspector.ui.fields import DRAFT_LEN, MAX_NEW, early_exit_bound, report_on_release, sampling_params, slider
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.viz import speculative as vsp
from inspector.viz.common import empty_figure, esc, status_line_html

LAB = "speculative"
DRAFTERS = ["ngram", "early-exit"]
OUTPUTS = 5  # status, text, rounds, kv figure, stats


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "spec-status-line")


def empty_outputs(message: str, error: bool = False) -> tuple:
    return (status_html(message, error), '<div id="spec-text"></div>', vsp.rounds_html([]),
            empty_figure("The KV cache per round appears here"), vsp.stats_html(None))


def outputs(run: SpeculativeRun, message: str) -> tuple:
    text = (f'<div id="spec-text" style="white-space:pre-wrap;font-family:monospace" '
            f'data-generated="{len(run.generated_ids)}" data-finished="{run.finished or ""}">'
            f"{esc(run.text)}</div>")
    return (status_html(message), text, vsp.rounds_html(run.rounds), vsp.kv_figure(run.rounds),
            vsp.stats_html(run.stats))


def drafter_spec(drafter: Any, layer: Any, config: Any) -> str:
    """The dropdown and layer slider as a drafter name (`ngram` or `early-exit:L`)."""
    if drafter == "early-exit":
        return f"early-exit:{early_exit_bound(config).parse(layer)}"
    return str(drafter)


def _status_only(message: str, *_: Any) -> tuple:
    """A refused Round or Play: the status says why, the run's views stay."""
    return (status_html(message, error=True),) + (gr.skip(),) * (OUTPUTS - 1)


@shows_refusals(lambda message, *_: empty_outputs(message, error=True))
def start(ctx: TabContext, sid: str | None, drafter: Any, layer: Any, k: Any, prompt: Any, chat: Any, system: Any,
          max_new: Any, *sampling: Any) -> tuple:
    """A new run: every cap first, then the prefill (token 1) on the prefill thread."""
    params = sampling_params(*sampling)
    max_new = admit_max_new(MAX_NEW.parse(max_new), ctx.limits)
    k = DRAFT_LEN.parse(k)
    spec = drafter_spec(drafter, layer, ctx.loaded.config)
    admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)
    check_draft_len(k, len(admitted.ids), ctx.loaded.config.max_position_embeddings)
    run = SpeculativeRun(ctx.loaded, make_drafter(spec, ctx.loaded.model), k, params, max_new_tokens=max_new)
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        state.clear()  # drop the previous run (and its caches) first
        model_thread.run_prefill(run.prefill, admitted.ids)
        state["run"] = run
    return outputs(run, f"prefill done ({len(admitted.ids)} prompt tokens): press Round or Play")


def _need_run(ctx: TabContext, sid: str | None) -> tuple[Any, SpeculativeRun]:
    entry, state = lab_state(ctx, sid, LAB)
    run = state.get("run")
    if run is None:
        raise InputError("nothing to run yet: press Start first")
    if run.finished:
        raise InputError(f"the run has finished ({run.finished}): press Start to begin again")
    return entry, run


def _one_round(run: SpeculativeRun) -> str:
    """One round, and the plain-decode timing once the run has finished (call it on the decode thread)."""
    r = run.round()
    if run.finished and run.stats.plain is None and run.stats.tokens:
        _, run.stats.plain = plain_decode(run.model, run.prompt_ids, run.stats.tokens)
    what = {"corrected": "corrected", "bonus": "bonus", "plain": "no drafts", "none": "ended"}[r.next_kind]
    done = f"; finished ({run.finished})" if run.finished else ""
    return f"round {r.index + 1}: kept {r.accepted} of {r.drafted} drafts, {what}{done}"


@shows_refusals(_status_only)
def round_(ctx: TabContext, sid: str | None) -> tuple:
    """The Round button: draft, verify in one forward, accept, roll back."""
    entry, run = _need_run(ctx, sid)
    with entry.exclusive(LAB):
        message = model_thread.run(_one_round, run)
    return outputs(run, message)


@shows_refusals(_status_only)
def play(ctx: TabContext, sid: str | None) -> Iterator[tuple]:
    """Rounds until the run finishes or Pause is pressed, the views after each round."""
    entry, run = _need_run(ctx, sid)
    entry.acquire(LAB)
    entry.pause.clear()
    message = ""
    try:
        while not entry.pause.is_set() and not run.finished:
            message = model_thread.run(_one_round, run)
            yield outputs(run, "playing — " + message)
    except InputError as exc:
        message = str(exc)
    finally:
        entry.release()
    yield outputs(run, ("paused after " if entry.pause.is_set() and not run.finished else "") + message)


def pause(ctx: TabContext, sid: str | None) -> None:
    """Ask a running Play to stop after the current round (not queued behind it)."""
    entry = ctx.store.get(sid)
    if entry is not None:
        entry.pause.set()


def build_speculative_tab(ctx: TabContext) -> None:
    fast = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
    n_layers = ctx.loaded.config.num_hidden_layers
    with gr.Tab("Speculative", elem_id="tab-speculative"):
        gr.Markdown(vsp.CAPTION + " Uses the page's prompt, chat toggle, sampling controls and max new tokens.",
                    elem_classes="ii-caption")
        with gr.Row():
            drafter = gr.Dropdown(DRAFTERS, value="ngram", label="drafter (ngram = prompt lookup)",
                                  elem_id="speculative-drafter")
            # a slider needs min < max: a 2-layer model shows 1..2, and 2 is refused in one line
            layer = slider(early_exit_bound(ctx.loaded.config), max(1, min(n_layers - 1, round(0.8 * n_layers))), 1,
                           "early-exit layer L (draft with the first L layers)", "speculative-layer")
            k = slider(DRAFT_LEN, 5, 1, "draft length k", "speculative-k")
        with gr.Row():
            start_btn = gr.Button("Start", variant="primary", elem_id="speculative-start")
            round_btn = gr.Button("Round →", elem_id="speculative-round")
            play_btn = gr.Button("Play ▶", elem_id="speculative-play")
            pause_btn = gr.Button("Pause", elem_id="speculative-pause")
        blank = empty_outputs("press Start to prefill the prompt")
        status = gr.HTML(blank[0], elem_id="speculative-status")
        text = gr.HTML(blank[1], elem_id="speculative-text")
        with gr.Row():
            with gr.Column(scale=3):
                rounds = gr.HTML(blank[2], elem_id="speculative-rounds")
            with gr.Column(scale=2):
                stats = gr.HTML(blank[4], elem_id="speculative-stats")
        kv = gr.Plot(blank[3], elem_id="speculative-kv", show_label=False)

    outs = [status, text, rounds, kv, stats]
    report_on_release(layer, early_exit_bound(ctx.loaded.config), status, status_html)
    report_on_release(k, DRAFT_LEN, status, status_html)
    start_btn.click(lambda sid, *a: start(ctx, sid, *a),
                    [ctx.sid, drafter, layer, k, ctx.prompt, ctx.chat, ctx.system, ctx.max_new, *ctx.sampling],
                    outs, **fast)
    round_btn.click(lambda sid: round_(ctx, sid), [ctx.sid], outs, **fast)

    def play_events(sid: str | None) -> Iterator[tuple]:  # a generator function: Gradio streams each yield
        yield from play(ctx, sid)

    play_btn.click(play_events, [ctx.sid], outs, **fast)
    pause_btn.click(lambda sid: pause(ctx, sid), [ctx.sid], None, queue=False, api_visibility="undocumented")
