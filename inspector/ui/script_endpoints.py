"""Named API endpoints for scripts (gradio_client): `prefill` and `step`.

They share the per-browser session machinery with the page (the id lives in the same `gr.State`, so a
`gradio_client.Client` keeps its own session across calls). Each returns a small dict:
`{text, prompt_ids, generated_ids, pieces, phase, finished, ttft_ms, last_tpot_ms}`. Errors raise
`gr.Error` with the one-line message.

    client.predict(prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new_tokens,
                   api_name="/prefill")
    client.predict(temperature, top_k, top_p, min_p, seed, api_name="/step")
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.ui.fields import sampling_params
from inspector.ui.refusals import api_error
from inspector.viz.header import phase_text
from inspector.viz.timing import timing_stats


def summary(visitor: Any) -> dict:
    """The session's tokens, text, phase and timings as plain JSON."""
    s = visitor.session
    st = timing_stats(s.records)
    return {
        "text": s.text, "prompt_ids": list(s.prompt_ids), "generated_ids": list(s.generated_ids),
        "pieces": s.token_pieces(), "finished": s.finished,
        "phase": phase_text(len(s.records), len(s.generated_ids), visitor.max_new_tokens, s.finished, visitor.playing),
        "ttft_ms": st["ttft_ms"], "last_tpot_ms": st["last_tpot_ms"],
    }


def register(h: Any, sid: gr.State, controls: list) -> None:
    """Hidden trigger buttons whose events carry api_name `prefill` and `step`.

    The numbers come in through hidden API-only boxes without a range or precision (Gradio passes their
    values on as sent); a prefill's arguments become the page's `RunRequest` (`Handlers.request`), checked
    once, and a step's are parsed by the page's fields (`sampling_params`): the error names the argument."""
    prompt, chat, system = controls
    # defaults as on the page: greedy, no filters, seed 0, 32 new tokens
    temperature, top_k, top_p, min_p, seed, max_new = (gr.Number(v, visible=False) for v in (0, 0, 1.0, 0, 0, 32))
    out = gr.JSON(visible=False)

    @api_error
    def api_prefill(sid_value, prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new_tokens):
        checked = h.request(sid_value, prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new_tokens)
        new_sid, visitor = h.start(sid_value, checked)
        return new_sid, summary(visitor)

    @api_error
    def api_step(sid_value, temperature, top_k, top_p, min_p, seed):
        return summary(h.run_step(sid_value, sampling_params(temperature, top_k, top_p, min_p, seed)))

    go_prefill = gr.Button(visible=False)
    go_step = gr.Button(visible=False)
    go_prefill.click(api_prefill, [sid, prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new],
                     [sid, out], api_name="prefill", concurrency_limit=None, show_progress="hidden")
    go_step.click(api_step, [sid, temperature, top_k, top_p, min_p, seed], [out], api_name="step",
                  concurrency_limit=None, show_progress="hidden")
