"""The Serving lab's prefix-caching comparison: one workload with a common system prompt, served four ways.

The section lays out, inside the Serving tab, the number of requests, new tokens per request, the prefill
chunk and the system prompt they share, a Compare button, and the table and figure of
`inspector.viz.prefix_cache`: TTFT and TPOT, the prefix cache's hit rate, blocks shared and prompt tokens
computed, with and without prefix caching and with and without chunked prefill, as the real scheduler ran
them (`inspector.serving.prefix_compare.compare`). Each request is the chat template around the system prompt
and one of the library questions (`QUESTIONS`); request i arrives at step 2i; batch 4, blocks of 16.

Every cap before model work: each prompt through `admit_prompt`, the new tokens through `admit_max_new`,
the whole run's tokens against the Serving lab's `token_cap`, the pool's bytes with the session's others
(`admit_memory`). The runs go on the model thread under the visitor's lock; nothing is kept.
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError
from inspector.serving.prefix_compare import QUESTIONS, SYSTEM, compare
from inspector.session.budget import kv_bytes
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_memory, admit_prompt, token_cap
from inspector.ui.fields import COMPARE_CHUNK, FreeNumber, requests_bound
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel
from inspector.ui.refusals import refuses
from inspector.viz import prefix_cache as vp
from inspector.viz.common import empty_figure

REQUESTS = requests_bound(len(QUESTIONS))
BLOCK_SIZE, MAX_BATCH, ARRIVAL_EVERY = 16, 4, 2
PART = "serving compare"  # what the comparison's pool is counted as in the session's memory cap


class ServingCompare(Panel):
    """Part of the Serving lab (see the module docstring)."""

    key, title, tab_id = "serving_compare", "Prefix caching and chunked prefill", "serving-prefix-panel"
    status_id = "serving-prefix-status-line"

    def layout(self) -> None:
        import gradio as gr

        with gr.Accordion("Prefix caching and chunked prefill: one workload served four ways", open=False,
                          elem_id=self.tab_id):
            gr.Markdown(vp.CAPTION, elem_classes="ii-caption")
            with gr.Row():
                self.n = FreeNumber(6, precision=0, label=f"requests (2 to {len(QUESTIONS)})",
                                    elem_id="serving-prefix-requests")
                self.new = FreeNumber(8, precision=0, label="new tokens per request", elem_id="serving-prefix-new")
                self.chunk = FreeNumber(64, precision=0, label="prefill chunk (tokens)", elem_id="serving-prefix-chunk")
                self.button = gr.Button("Compare", variant="primary", elem_id="serving-prefix-run")
            self.system = gr.Textbox(SYSTEM, lines=3, label="the system prompt every request shares",
                                     elem_id="serving-prefix-system")
            self.show("status", gr.HTML(self.status("press Compare to serve the workload four ways"),
                                        elem_id="serving-prefix-status"))
            self.show("table", gr.HTML("", elem_id="serving-prefix-table"))
            self.show("figure", Figure(empty_figure("TTFT and TPOT per configuration appear after Compare"),
                                       elem_id="serving-prefix-fig", show_label=False))

    def wire(self) -> None:
        self.on(self.button.click, self.run_compare, [self.page.sid, self.n, self.new, self.chunk, self.system])

    @refuses
    def run_compare(self, sid: str | None, n_requests: Any, max_new: Any, chunk: Any, system: Any) -> dict[str, Any]:
        """Compare: the workload served plain, with prefix caching, with chunked prefill and with both."""
        loaded, limits = self.page.loaded, self.page.limits
        n, ch = int(REQUESTS.parse(n_requests)), int(COMPARE_CHUNK.parse(chunk))
        new = admit_max_new(max_new, limits)
        if not isinstance(system, str) or not system.strip():
            raise InputError("the shared system prompt is empty: the comparison needs a common prefix")
        prompts = [admit_prompt(loaded, limits, QUESTIONS[i], True, system).ids for i in range(n)]
        total = sum(len(p) + new for p in prompts)
        if total > token_cap(limits):
            raise InputError(f"these requests hold {total} tokens (prompts + new tokens); the Serving lab allows "
                             f"{token_cap(limits)} per visitor here: fewer requests or new tokens")
        longest = max(len(p) for p in prompts) + new
        blocks = MAX_BATCH * -(-longest // BLOCK_SIZE) + 8  # as `prefix_compare.serve` sizes its pool
        admit_memory(self.page.store, sid, limits, PART, kv_bytes(loaded.config, blocks * BLOCK_SIZE,
                                                                  loaded.dtype.itemsize))
        _, visitor = self.page.store.get_or_create(sid)
        with visitor.exclusive("serving compare"):
            runs = model_thread.call(compare, loaded.model, loaded.config, loaded.dtype, prompts, new, chunk=ch,
                                    arrival_every=ARRIVAL_EVERY, block_size=BLOCK_SIZE, max_batch=MAX_BATCH)
        lengths = sorted(len(p) for p in prompts)
        return {"status": self.status(f"{n} requests of {lengths[0]}-{lengths[-1]} prompt tokens sharing the system "
                                      f"prompt, {new} new tokens each: served 4 ways"),
                "table": vp.table_html(runs), "figure": vp.ttft_tpot_figure(runs)}
