"""The Serving lab's prefix-caching comparison: one workload with a common system prompt, served four ways.

`build_prefix_compare(ctx)` lays out, inside the Serving tab, the number of requests, new tokens per
request, the prefill chunk and the system prompt they share, a Compare button, and the table and figure of
`inspector.viz.prefix_cache`: TTFT and TPOT, the prefix cache's hit rate, blocks shared and prompt tokens
computed, with and without prefix caching and with and without chunked prefill, as the real scheduler ran
them (`inspector.serving.prefix_compare.compare`). Each request is the chat template around the system prompt
and one of the library questions (`QUESTIONS`); request i arrives at step 2i; batch 4, blocks of 16.

Every cap before model work: each prompt through `admit_prompt`, the new tokens through `admit_max_new`,
the whole run's tokens against the Serving lab's `token_cap`, the pool's bytes with the session's others
(`admit_memory`). The runs go on the model thread under the entry's lock; bad input is one line.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.engine.kv_cache import kv_bytes
from inspector.errors import InputError
from inspector.serving.prefix_compare import QUESTIONS, SYSTEM, compare
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_memory, admit_prompt, token_cap
from inspector.ui.fields import FreeNumber
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext
from inspector.validate import Bound
from inspector.viz import prefix_cache as vp
from inspector.viz.common import empty_figure, status_line_html

REQUESTS = Bound("requests", True, 2, len(QUESTIONS))
CHUNK = Bound("prefill chunk", True, 1, 100_000)
BLOCK_SIZE, MAX_BATCH, ARRIVAL_EVERY = 16, 4, 2
PART = "serving compare"  # what the comparison's pool is counted as in the session's memory cap


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "serving-prefix-status-line")


def _refused(message: str, *_: Any) -> tuple:
    return status_html(message, error=True), gr.skip(), gr.skip()


@shows_refusals(_refused)
def run_compare(ctx: TabContext, sid: str | None, n_requests: Any, max_new: Any, chunk: Any, system: Any) -> tuple:
    """Compare: the workload served plain, with prefix caching, with chunked prefill and with both."""
    n, ch = int(REQUESTS.parse(n_requests)), int(CHUNK.parse(chunk))
    new = admit_max_new(max_new, ctx.limits)
    if not isinstance(system, str) or not system.strip():
        raise InputError("the shared system prompt is empty: the comparison needs a common prefix")
    prompts = [admit_prompt(ctx.loaded, ctx.limits, QUESTIONS[i], True, system).ids for i in range(n)]
    total = sum(len(p) + new for p in prompts)
    if total > token_cap(ctx.limits):
        raise InputError(f"these requests hold {total} tokens (prompts + new tokens); the Serving lab allows "
                         f"{token_cap(ctx.limits)} per visitor here: fewer requests or new tokens")
    longest = max(len(p) for p in prompts) + new
    blocks = MAX_BATCH * -(-longest // BLOCK_SIZE) + 8  # as `prefix_compare.serve` sizes its pool
    elem = ctx.loaded.model.model.embed_tokens.weight.element_size()
    admit_memory(ctx.store, sid, ctx.limits, PART, kv_bytes(ctx.loaded.config, blocks * BLOCK_SIZE, elem))
    _, entry = ctx.store.get_or_create(sid)
    with entry.exclusive("serving compare"):
        runs = model_thread.run(compare, ctx.loaded.model, ctx.loaded.config, ctx.loaded.dtype, prompts, new,
                                chunk=ch, arrival_every=ARRIVAL_EVERY, block_size=BLOCK_SIZE, max_batch=MAX_BATCH)
    lengths = sorted(len(p) for p in prompts)
    return (status_html(f"{n} requests of {lengths[0]}-{lengths[-1]} prompt tokens sharing the system prompt, "
                        f"{new} new tokens each: served 4 ways"), vp.table_html(runs), vp.ttft_tpot_figure(runs))


def build_prefix_compare(ctx: TabContext) -> None:
    """The comparison's controls and views, laid out where it is called (the Serving tab)."""
    with gr.Accordion("Prefix caching and chunked prefill: one workload served four ways", open=False,
                      elem_id="serving-prefix-panel"):
        gr.Markdown(vp.CAPTION, elem_classes="ii-caption")
        with gr.Row():
            n = FreeNumber(6, precision=0, label=f"requests (2 to {len(QUESTIONS)})", elem_id="serving-prefix-requests")
            new = FreeNumber(8, precision=0, label="new tokens per request", elem_id="serving-prefix-new")
            chunk = FreeNumber(64, precision=0, label="prefill chunk (tokens)", elem_id="serving-prefix-chunk")
            btn = gr.Button("Compare", variant="primary", elem_id="serving-prefix-run")
        system = gr.Textbox(SYSTEM, lines=3, label="the system prompt every request shares",
                            elem_id="serving-prefix-system")
        status = gr.HTML(status_html("press Compare to serve the workload four ways"), elem_id="serving-prefix-status")
        table = gr.HTML("", elem_id="serving-prefix-table")
        fig = gr.Plot(empty_figure("TTFT and TPOT per configuration appear after Compare"),
                      elem_id="serving-prefix-fig", show_label=False)
    btn.click(lambda sid, *a: run_compare(ctx, sid, *a), [ctx.sid, n, new, chunk, system], [status, table, fig],
              show_progress="hidden", concurrency_limit=None, api_visibility="undocumented")
