"""The Serving lab: continuous batching over a paged KV cache on the page's model, stepped by hand.

The tab lays out a request box (one request per line: `arrival | max new tokens | prompt`, or just a prompt,
which arrives at step 0 with the page's max new tokens), the scheduler's settings (max batch, block size,
pool blocks, continuations per request, prefix caching, prefill chunk), Load / Step / Play / Pause, and the
figures of `inspector.viz.serving`; below them the memory calculator (`inspector.ui.labs.serving_memory`)
and the prefix-caching comparison (`inspector.ui.labs.serving_compare`).

The scheduler is this panel's state (its block pool counted by `nbytes`). Before any model work, Load
checks every cap: each prompt through `admit_prompt`, each max-new-tokens through `admit_max_new`, the
whole run's tokens (prompts + continuations x max new tokens, summed) against `token_cap(limits)` = max
prompt tokens + max steps, and the pool's bytes against max_trace_mb and the session's others. Steps run
on the decode thread under the visitor's lock; Play (`inspector.ui.play`) holds it for each step only, so a
Load pressed during Play replaces the run and that Play ends. Prompts use the page's chat-template toggle,
system prompt and sampling controls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from inspector.errors import InputError
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.roofline import cached_peaks, peaks_directory
from inspector.serving.scheduler import Scheduler, Status
from inspector.serving.view import serving_view, throughput
from inspector.session.budget import kv_bytes
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_memory, admit_prompt, token_cap
from inspector.ui.fields import (BLOCK_SIZE, CONTINUATIONS, MAX_BATCH, POOL_BLOCKS, PREFILL_CHUNK, FreeNumber,
                                 arrival_bound, report_on_release, sampling_params, slider)
from inspector.ui.figure import Figure
from inspector.ui.labs.serving_compare import ServingCompare
from inspector.ui.labs.serving_memory import MemoryCalculator
from inspector.ui.panel import Page, Panel, PanelState
from inspector.ui.play import play_steps
from inspector.ui.refusals import refuses
from inspector.units import format_bytes
from inspector.viz import serving as vs
from inspector.viz.common import empty_figure, esc

MAX_REQUESTS = 16
PLAY_MAX_STEPS = 2000  # a Play never runs longer than this many engine steps
BLOCK_SIZES = [4, 8, 16, 32]
DEFAULT_REQUESTS = "\n".join([
    "0 | 24 | The capital of France is",
    "0 | 16 | Write a haiku about the sea.",
    "2 | 24 | def fibonacci(n):",
    "4 | 16 | Name three primary colors.",
])
LINE = re.compile(r"^\s*(\d+)\s*\|\s*(\d+)\s*\|(.*)$")
ARRIVAL = arrival_bound(PLAY_MAX_STEPS)  # a request arriving later would never be served
HINT = "press Load to queue the requests"


def parse_requests(text: Any, default_max_new: int) -> list[tuple[str, int, int]]:
    """(prompt, max new tokens, arrival step) per non-blank line; InputError naming the first bad line."""
    from inspector.ui.fields import MAX_NEW

    lines = [line for line in str(text or "").splitlines() if line.strip()]
    if not lines:
        raise InputError("no requests: write one prompt per line (optionally `arrival | max new tokens | prompt`)")
    if len(lines) > MAX_REQUESTS:
        raise InputError(f"{len(lines)} requests; the Serving lab takes at most {MAX_REQUESTS}")
    out = []
    for i, line in enumerate(lines, 1):
        m = LINE.match(line)
        if m:
            try:
                prompt, max_new, arrival = m.group(3).strip(), MAX_NEW.parse(m.group(2)), ARRIVAL.parse(m.group(1))
            except InputError as exc:
                raise InputError(f"request {i}: {exc}") from None
        else:
            prompt, max_new, arrival = line.strip(), default_max_new, 0
        if not prompt:
            raise InputError(f"request {i} has no prompt after `arrival | max new tokens |`")
        out.append((prompt, max_new, arrival))
    return out


@dataclass
class ServingState(PanelState):
    sched: Scheduler | None = None
    peaks: Any = None  # the machine's roofline peaks (inspector.serving.roofline)
    labels: list[str] = field(default_factory=list)  # per sequence: "#i prompt..."

    def nbytes(self) -> int:
        """The scheduler's block pool, as allocated."""
        return self.sched.cache.pool_nbytes if self.sched is not None else 0


class ServingLab(Panel):
    key, title, tab_id = "serving", "Serving", "tab-serving"
    State = ServingState

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.compare = ServingCompare(page)
        self.memory = MemoryCalculator(page)

    def requests_html(self, state: ServingState) -> str:
        rows = []
        for req in state.sched.requests:
            done = "refused: " + req.finish_reason if req.status is Status.REFUSED else req.status.value
            text = self.page.loaded.tokenizer.decode(req.output_ids) if req.output_ids else ""
            rows.append(f'<tr data-status="{req.status.value}"><td>#{req.request_id}</td><td>{req.arrival_step}</td>'
                        f"<td>{esc(state.labels[req.request_id])}</td><td>{esc(done)}</td>"
                        f"<td>{len(req.output_ids)} / {req.max_new_tokens}</td><td>{esc(text)}</td></tr>")
        return ('<table class="ii-table"><tr><th>request</th><th>arrives</th><th>prompt</th><th>state</th>'
                f"<th>tokens</th><th>text</th></tr>{''.join(rows)}</table>")

    def views(self, state: ServingState, message: str, error: bool = False) -> dict[str, Any]:
        sched = state.sched
        view = serving_view(sched, state.labels, state.peaks)
        tokens, tok_s = throughput(view.steps)
        max_len = {s.request_id: s.max_len for s in sched.requests}
        paged = max((r.blocks_used for r in view.steps), default=0) * sched.cache.bytes_per_block
        contiguous = max((sum(max_len[row.request_id] for row in r.rows) for r in view.steps), default=0) * \
            sched.cache.bytes_per_position
        return {"status": self.status(message, error), "summary": vs.summary_html(view, tokens, tok_s, paged, contiguous),
                "grid": vs.block_grid_figure(view.grid), "timeline": vs.timeline_figure(view.timelines),
                "tokens": vs.tokens_figure(view.steps), "roofline": vs.roofline_figure(view.steps, view.peaks),
                "table": self.requests_html(state)}

    def layout(self) -> None:
        import gradio as gr

        limits = self.page.limits
        gr.Markdown(vs.CAPTION + f" On this shared server one visitor's run may hold {token_cap(limits)} tokens "
                    "(prompts + max new tokens, summed) and a pool of at most "
                    f"{limits.max_trace_mb} MiB. Prompts use the page's chat toggle and sampling controls.",
                    elem_classes="ii-caption")
        with gr.Row():
            self.text = gr.Textbox(DEFAULT_REQUESTS, lines=6, scale=3, elem_id="serving-requests",
                                   label="Requests, one per line: arrival step | max new tokens | prompt (or just a "
                                         "prompt)")
            with gr.Column(scale=1):
                self.max_batch = slider(MAX_BATCH, 4, 1, "max batch", "serving-max-batch")
                self.block_size = gr.Dropdown(BLOCK_SIZES, value=16, label="block size", elem_id="serving-block-size")
                self.pool = FreeNumber(0, precision=0, label="pool blocks (0 = a full batch of the longest)",
                                       elem_id="serving-pool")
                self.n = slider(CONTINUATIONS, 1, 1, "continuations per request (parallel sampling)", "serving-n")
                self.prefix = gr.Checkbox(False, label="prefix caching (reuse cached prompt blocks)",
                                          elem_id="serving-prefix")
                self.chunk = FreeNumber(0, precision=0, label="prefill chunk (0 = whole prompts)", elem_id="serving-chunk")
        with gr.Row():
            self.load_btn = gr.Button("Load", variant="primary", elem_id="serving-load")
            self.step_btn = gr.Button("Step", elem_id="serving-step")
            self.play_btn = gr.Button("Play", elem_id="serving-play")
            self.pause_btn = gr.Button("Pause", elem_id="serving-pause")
        self.show("status", gr.HTML(self.status(HINT), elem_id="serving-status"))
        self.show("summary", gr.HTML("", elem_id="serving-summary-box"))
        with gr.Row():
            self.show("grid", Figure(empty_figure(HINT), elem_id="serving-grid", show_label=False))
            self.show("timeline", Figure(empty_figure(HINT), elem_id="serving-timeline", show_label=False))
        with gr.Row():
            self.show("tokens", Figure(empty_figure(HINT), elem_id="serving-tokens", show_label=False))
            self.show("roofline", Figure(empty_figure(HINT), elem_id="serving-roofline", show_label=False))
        self.show("table", gr.HTML("", elem_id="serving-table"))
        self.memory.layout()
        self.compare.layout()

    def wire(self) -> None:
        p = self.page
        status = self.outputs["status"]
        report_on_release(self.max_batch, MAX_BATCH, status, self.status)
        report_on_release(self.n, CONTINUATIONS, status, self.status)
        self.on(self.load_btn.click, self.load_controls,
                [p.sid, self.text, self.max_batch, self.block_size, self.pool, self.n, p.chat, p.system, p.max_new,
                 *p.sampling, self.prefix, self.chunk])
        self.on(self.step_btn.click, self.step, [p.sid])
        self.on(self.play_btn.click, self.play, [p.sid])
        self.on(self.pause_btn.click, self.pause, [p.sid], [], queue=False)
        self.memory.wire()
        self.compare.wire()

    def load_controls(self, sid: str | None, *values: Any) -> dict[str, Any]:
        """Load, from the controls in the order `wire` lists them (the last two: prefix caching, chunk)."""
        return self.load(sid, *values[:-2], prefix_caching=values[-2], prefill_chunk=values[-1])

    @refuses
    def load(self, sid: str | None, text: Any, max_batch: Any, block_size: Any, pool_blocks: Any, n: Any, chat: Any,
             system: Any, max_new: Any, *sampling: Any, prefix_caching: Any = False,
             prefill_chunk: Any = 0) -> dict[str, Any]:
        """Queue the requests on a fresh scheduler (dropping this browser's previous run): every cap first.
        `prefix_caching` reuses cached prompt-prefix blocks; `prefill_chunk` > 0 splits prompts into chunks."""
        loaded, limits = self.page.loaded, self.page.limits
        chunk = PREFILL_CHUNK.parse(prefill_chunk) or None
        default_max_new = admit_max_new(max_new, limits)
        requests = parse_requests(text, default_max_new)
        max_batch, n = MAX_BATCH.parse(max_batch), CONTINUATIONS.parse(n)
        block_size, pool_blocks = BLOCK_SIZE.parse(block_size), POOL_BLOCKS.parse(pool_blocks)
        if n > max_batch:
            raise InputError(f"{n} continuations per request need a max batch of at least {n}")
        params = sampling_params(*sampling)
        ids = [admit_prompt(loaded, limits, p, bool(chat), system).ids for p, _, _ in requests]
        news = [admit_max_new(m, limits) for _, m, _ in requests]
        total = sum(len(i) + n * m for i, m in zip(ids, news))
        if total > token_cap(limits):
            raise InputError(f"these requests hold {total} tokens (prompts + {n} x max new tokens); the Serving lab "
                             f"allows {token_cap(limits)} per visitor here")
        config = loaded.config
        if pool_blocks == 0:  # a full batch of the longest request
            pool_blocks = max_batch * math.ceil(max(len(i) + m for i, m in zip(ids, news)) / block_size)
        pool_bytes = kv_bytes(config, pool_blocks * block_size, loaded.dtype.itemsize)
        if pool_bytes > limits.max_trace_mb * 2**20:
            raise InputError(f"a pool of {pool_blocks} blocks of {block_size} takes {format_bytes(pool_bytes)}; "
                             f"this server allows {limits.max_trace_mb} MiB per visitor (INSPECTOR_MAX_TRACE_MB)")
        admit_memory(self.page.store, sid, limits, self.key, pool_bytes)  # with the page's session and the others
        visitor, state = self.state(sid)

        def build() -> tuple[Scheduler, Any]:
            cache = PagedKVCache(config, pool_blocks, block_size, dtype=loaded.dtype, prefix_caching=bool(prefix_caching))
            sched = Scheduler(loaded.model, cache, max_batch=max_batch, eos_ids=loaded.stop_ids, prefill_chunk=chunk)
            for prompt_ids, m, (_, _, arrival) in zip(ids, news, requests):
                sched.add(prompt_ids, m, arrival, n=n, params=params)
            return sched, cached_peaks(peaks_directory(loaded.weights_path), loaded.dtype)

        with visitor.exclusive("serving load"):
            state.sched = None  # drop the previous pool first
            state.sched, state.peaks = model_thread.call(build)
            # sequence i is continuation i % n of request i // n (Scheduler.add numbers them in order)
            state.labels = [f"#{i} {requests[i // n][0][:24]}" for i in range(len(requests) * n)]
        sched = state.sched
        refused = sum(1 for s in sched.requests if s.status is Status.REFUSED)
        note = f"; {refused} refused (see the table)" if refused else ""
        k = len(sched.requests)
        return self.views(state, f"queued {k} sequence{'s' if k != 1 else ''} in a pool of {pool_blocks} blocks "
                                 f"of {block_size}{note}: press Step or Play")

    def loaded_state(self, sid: str | None) -> tuple[Any, ServingState]:
        state = self.kept(sid)
        if state is None or state.sched is None:
            raise InputError("nothing queued: press Load first")
        return self.page.store.get(sid), state

    def one_step(self, state: ServingState) -> str:
        """One scheduler step on the decode thread (the caller holds the visitor); what it did, in one line."""
        sched = state.sched
        if sched.done:
            return "every request has finished (or was refused): press Load to start again"
        rec = model_thread.call(sched.step)
        rows = ", ".join(f"#{r.request_id} {r.kind} {r.num_tokens}" for r in rec.rows) or "idle (nothing arrived yet)"
        pc = sched.cache.prefix_stats()
        prefix = (f"; prefix cache: {pc.hits}/{pc.lookups} blocks hit ({pc.hit_rate:.0%}), {pc.tokens_reused} tokens "
                  f"reused, {pc.blocks_shared} blocks shared" if sched.cache.prefix_caching else "")
        return f"step {rec.step}: {rows}{prefix}" + (" — all done" if sched.done else "")

    @refuses
    def step(self, sid: str | None) -> dict[str, Any]:
        visitor, state = self.loaded_state(sid)
        with visitor.exclusive("serving step"):
            message = self.one_step(state)
        return self.views(state, message)

    @refuses
    def play(self, sid: str | None) -> Iterator[dict[str, Any]]:
        """Step until every request is done or Pause is pressed, drawing after each step; a Load meanwhile
        replaces the run and ends this Play."""
        visitor, state = self.loaded_state(sid)
        sched, said, steps = state.sched, [""], [0]
        if sched.done:
            yield self.views(state, "all done")
            return

        def advance() -> bool:
            if state.sched is not sched or sched.done:
                return False
            said[0] = self.one_step(state)
            steps[0] += 1
            return not sched.done and steps[0] < PLAY_MAX_STEPS

        for update in play_steps(visitor, advance, activity="serving step", hold=False):
            if state.sched is not sched:
                return  # a new Load: it shows its own run
            yield self.views(state, said[0])
        if state.sched is sched:
            yield self.views(state, "paused" if visitor.pause.is_set() else "all done" if sched.done
                             else f"stopped after {PLAY_MAX_STEPS} steps")
