"""The Serving lab tab: continuous batching over a paged KV cache on the page's model, stepped by hand.

`build_serving_tab(ctx)` lays out a request box (one request per line: `arrival | max new tokens | prompt`,
or just a prompt, which arrives at step 0 with the page's max new tokens), the scheduler's settings (max
batch, block size, pool blocks, continuations per request), Load / Step / Play / Pause, and the figures of
`inspector.viz.serving`; below them the memory calculator (a shipped config, context, batch, dtype and a
memory budget, computed by `inspector.serving.memory`, no model work).

The handlers are module functions of (ctx, ...) so tests call them without a browser. The scheduler lives
in this browser session's lab state (`lab_state(ctx, sid, "serving")`), freed with the session. Before any
model work, Load checks every cap: each prompt through `admit_prompt`, each max-new-tokens through
`admit_max_new`, the whole run's tokens (prompts + continuations x max new tokens, summed) against
`token_cap(limits)` = max prompt tokens + max steps, and the pool's bytes against max_trace_mb. Steps run on
the decode model thread under `entry.exclusive("serving")`; bad input is one line in the tab's status
(`shows_refusals`), every number parsed through `inspector.ui.fields`.
Prompts use the page's chat-template toggle, system prompt and sampling controls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import gradio as gr

from inspector.engine.kv_cache import kv_bytes
from inspector.errors import InputError
from inspector.serving.memory import shipped_configs
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.roofline import cached_peaks, peaks_directory
from inspector.serving.scheduler import Scheduler, Status
from inspector.serving.view import memory_bars, serving_view, throughput
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_memory, admit_prompt, token_cap
from inspector.ui.fields import (BLOCK_SIZE, CONTINUATIONS, MAX_BATCH, MAX_NEW, MEM_BATCH, MEM_CONTEXT, MEM_GIB,
                                 POOL_BLOCKS, PREFILL_CHUNK, FreeNumber, report_on_release, sampling_params, slider)
from inspector.ui.refusals import shows_refusals
from inspector.ui.serving_prefix import build_prefix_compare
from inspector.ui.tab_context import TabContext, lab_state
from inspector.units import format_bytes
from inspector.viz import serving as vs
from inspector.validate import Bound
from inspector.viz.common import empty_figure, esc, status_line_html

LAB = "serving"
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
MEMORY_DTYPES = ["bf16", "fp16", "fp32", "int8", "int4"]
ARRIVAL = Bound("arrival step", True, 0, PLAY_MAX_STEPS)  # a request arriving later would never be served


def parse_requests(text: Any, default_max_new: int) -> list[tuple[str, int, int]]:
    """(prompt, max new tokens, arrival step) per non-blank line; InputError naming the first bad line."""
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


# ---- outputs: status, summary, block grid, timeline, tokens per step, roofline, request table

def requests_html(ctx: TabContext, state: dict) -> str:
    sched: Scheduler = state["sched"]
    rows = []
    for seq in sched.sequences:
        done = "refused: " + seq.finish_reason if seq.status is Status.REFUSED else seq.status.value
        text = ctx.loaded.tokenizer.decode(seq.output_ids) if seq.output_ids else ""
        rows.append(f'<tr data-status="{seq.status.value}"><td>#{seq.seq_id}</td><td>{seq.arrival_step}</td>'
                    f"<td>{esc(state['labels'][seq.seq_id])}</td><td>{esc(done)}</td>"
                    f"<td>{len(seq.output_ids)} / {seq.max_new_tokens}</td><td>{esc(text)}</td></tr>")
    return ('<table class="ii-table"><tr><th>request</th><th>arrives</th><th>prompt</th><th>state</th>'
            f"<th>tokens</th><th>text</th></tr>{''.join(rows)}</table>")


def empty_outputs(message: str, error: bool = False) -> tuple:
    hint = "press Load to queue the requests"
    return (status_line_html(message, error), "", empty_figure(hint), empty_figure(hint), empty_figure(hint),
            empty_figure(hint), "")


def outputs(ctx: TabContext, state: dict, message: str, error: bool = False) -> tuple:
    sched: Scheduler = state["sched"]
    view = serving_view(sched, state["labels"], state["peaks"])
    tokens, tok_s = throughput(view.steps)
    max_len = {s.seq_id: s.max_len for s in sched.sequences}
    paged = max((r.blocks_used for r in view.steps), default=0) * sched.cache.bytes_per_block
    contiguous = max((sum(max_len[row.seq_id] for row in r.rows) for r in view.steps), default=0) * \
        sched.cache.bytes_per_position
    summary = vs.summary_html(view, tokens, tok_s, paged, contiguous)
    return (status_line_html(message, error), summary, vs.block_grid_figure(view.grid), vs.timeline_figure(view.timelines),
            vs.tokens_figure(view.steps), vs.roofline_figure(view.steps, view.peaks), requests_html(ctx, state))


# ---- handlers

@shows_refusals(lambda message, *_, **__: empty_outputs(message, error=True))
def load(ctx: TabContext, sid: str | None, text: Any, max_batch: Any, block_size: Any, pool_blocks: Any, n: Any,
         chat: Any, system: Any, max_new: Any, *sampling: Any, prefix_caching: Any = False,
         prefill_chunk: Any = 0) -> tuple:
    """Queue the requests on a fresh scheduler (dropping this browser's previous run): every cap first.
    `prefix_caching` reuses cached prompt-prefix blocks; `prefill_chunk` > 0 splits prompts into chunks."""
    chunk = PREFILL_CHUNK.parse(prefill_chunk) or None
    default_max_new = admit_max_new(MAX_NEW.parse(max_new), ctx.limits)
    requests = parse_requests(text, default_max_new)
    max_batch, n = MAX_BATCH.parse(max_batch), CONTINUATIONS.parse(n)
    block_size, pool_blocks = BLOCK_SIZE.parse(block_size), POOL_BLOCKS.parse(pool_blocks)
    if n > max_batch:
        raise InputError(f"{n} continuations per request need a max batch of at least {n}")
    params = sampling_params(*sampling)
    ids = [admit_prompt(ctx.loaded, ctx.limits, p, bool(chat), system).ids for p, _, _ in requests]
    news = [admit_max_new(m, ctx.limits) for _, m, _ in requests]
    total = sum(len(i) + n * m for i, m in zip(ids, news))
    if total > token_cap(ctx.limits):
        raise InputError(f"these requests hold {total} tokens (prompts + {n} x max new tokens); the Serving lab "
                         f"allows {token_cap(ctx.limits)} per visitor here")
    config = ctx.loaded.config
    if pool_blocks == 0:  # a full batch of the longest request
        pool_blocks = max_batch * math.ceil(max(len(i) + m for i, m in zip(ids, news)) / block_size)
    elem = ctx.loaded.model.model.embed_tokens.weight.element_size()
    pool_bytes = kv_bytes(config, pool_blocks * block_size, elem)
    if pool_bytes > ctx.limits.max_trace_mb * 2**20:
        raise InputError(f"a pool of {pool_blocks} blocks of {block_size} takes {format_bytes(pool_bytes)}; "
                         f"this server allows {ctx.limits.max_trace_mb} MiB per visitor (INSPECTOR_MAX_TRACE_MB)")
    admit_memory(ctx.store, sid, ctx.limits, LAB, pool_bytes)  # with the page's session and the other labs
    entry, state = lab_state(ctx, sid, LAB)
    with entry.exclusive("serving load"):
        def build() -> tuple[Scheduler, Any]:
            cache = PagedKVCache(config, pool_blocks, block_size, dtype=ctx.loaded.dtype,
                                 prefix_caching=bool(prefix_caching))
            sched = Scheduler(ctx.loaded.model, cache, max_batch=max_batch, eos_ids=ctx.loaded.stop_ids,
                              prefill_chunk=chunk)
            for prompt_ids, m, (_, _, arrival) in zip(ids, news, requests):
                sched.add(prompt_ids, m, arrival, n=n, params=params)
            return sched, cached_peaks(peaks_directory(ctx.loaded.weights_path), ctx.loaded.dtype)

        sched, peaks = model_thread.run(build)
        state.clear()
        # sequence i is continuation i % n of request i // n (Scheduler.add numbers them in order)
        labels = [f"#{i} {requests[i // n][0][:24]}" for i in range(len(requests) * n)]
        state.update(sched=sched, peaks=peaks, paused=False, labels=labels)
    refused = sum(1 for s in sched.sequences if s.status is Status.REFUSED)
    note = f"; {refused} refused (see the table)" if refused else ""
    k = len(sched.sequences)
    return outputs(ctx, state, f"queued {k} sequence{'s' if k != 1 else ''} in a pool of {pool_blocks} blocks "
                               f"of {block_size}{note}: press Step or Play")


def _scheduler(ctx: TabContext, sid: str | None) -> tuple[Any, dict]:
    entry, state = lab_state(ctx, sid, LAB)
    if not state.get("sched"):
        raise InputError("nothing queued: press Load first")
    return entry, state


def _one_step(entry: Any, state: dict) -> str:
    sched: Scheduler = state["sched"]
    if sched.done:
        return "every request has finished (or was refused): press Load to start again"
    with entry.exclusive("serving step"):
        rec = model_thread.run(sched.step)
    rows = ", ".join(f"#{r.seq_id} {r.kind} {r.num_tokens}" for r in rec.rows) or "idle (nothing arrived yet)"
    pc = sched.cache.prefix_stats()
    prefix = (f"; prefix cache: {pc.hits}/{pc.lookups} blocks hit ({pc.hit_rate:.0%}), {pc.tokens_reused} tokens "
              f"reused, {pc.blocks_shared} blocks shared" if sched.cache.prefix_caching else "")
    return f"step {rec.step}: {rows}{prefix}" + (" — all done" if sched.done else "")


@shows_refusals(lambda message, *_: empty_outputs(message, error=True))
def step(ctx: TabContext, sid: str | None) -> tuple:
    entry, state = _scheduler(ctx, sid)
    return outputs(ctx, state, _one_step(entry, state))


@shows_refusals(lambda message, *_: empty_outputs(message, error=True))
def play(ctx: TabContext, sid: str | None) -> Iterator[tuple]:
    """Step until every request is done or Pause is pressed, drawing after each step."""
    entry, state = _scheduler(ctx, sid)
    sched, state["paused"] = state["sched"], False
    for _ in range(PLAY_MAX_STEPS):
        if state["paused"] or sched.done or state.get("sched") is not sched:  # Pause, the end, or a new Load
            break
        yield outputs(ctx, state, _one_step(entry, state))
    if state.get("sched") is sched:
        yield outputs(ctx, state, "paused" if state["paused"] else "all done" if sched.done
                      else f"stopped after {PLAY_MAX_STEPS} steps")


def pause(ctx: TabContext, sid: str | None) -> None:
    try:
        _, state = lab_state(ctx, sid, LAB)
        state["paused"] = True
    except InputError:
        pass  # no session slot: there is nothing playing to pause


@shows_refusals(lambda message, *_: (empty_figure(message), status_line_html(message, error=True)))
def memory_view(config: Any, context: Any, batch: Any, dtype: Any, memory_gib: Any) -> tuple[Any, str]:
    """The memory calculator's figure and one line of numbers (no model work)."""
    context, batch = MEM_CONTEXT.parse(context), MEM_BATCH.parse(batch)
    memory = MEM_GIB.parse(memory_gib) * 2**30
    bars = memory_bars(str(config), context, batch, str(dtype), memory)
    saved = bars[1].kv_bytes / bars[0].kv_bytes if bars[0].kv_bytes else 1.0
    line = (f"{config}, {dtype}: weights {bars[0].weight_bytes / 2**30:.2f} GiB; KV cache for {batch} x {context} "
            f"tokens {bars[0].kv_bytes / 2**30:.2f} GiB ({saved:.1f}x less than full MHA); "
            f"{bars[0].fits_requests} requests of {context} tokens fit in {memory // 2**30} GiB")
    return vs.memory_figure(bars, memory), f'<div id="serving-mem-line">{esc(line)}</div>'


# ---- layout and wiring

def build_serving_tab(ctx: TabContext) -> None:
    fast = {"show_progress": "hidden", "concurrency_limit": None}
    with gr.Tab("Serving", elem_id="tab-serving"):
        gr.Markdown(vs.CAPTION + f" On this shared server one visitor's run may hold {token_cap(ctx.limits)} tokens "
                    "(prompts + max new tokens, summed) and a pool of at most "
                    f"{ctx.limits.max_trace_mb} MiB. Prompts use the page's chat toggle and sampling controls.",
                    elem_classes="ii-caption")
        with gr.Row():
            text = gr.Textbox(DEFAULT_REQUESTS, lines=6, scale=3, elem_id="serving-requests",
                              label="Requests, one per line: arrival step | max new tokens | prompt (or just a prompt)")
            with gr.Column(scale=1):
                max_batch = slider(MAX_BATCH, 4, 1, "max batch", "serving-max-batch")
                block_size = gr.Dropdown(BLOCK_SIZES, value=16, label="block size", elem_id="serving-block-size")
                pool = FreeNumber(0, precision=0, label="pool blocks (0 = a full batch of the longest)",
                                  elem_id="serving-pool")
                n = slider(CONTINUATIONS, 1, 1, "continuations per request (parallel sampling)", "serving-n")
                prefix = gr.Checkbox(False, label="prefix caching (reuse cached prompt blocks)", elem_id="serving-prefix")
                chunk = FreeNumber(0, precision=0, label="prefill chunk (0 = whole prompts)", elem_id="serving-chunk")
        with gr.Row():
            load_btn = gr.Button("Load", variant="primary", elem_id="serving-load")
            step_btn = gr.Button("Step", elem_id="serving-step")
            play_btn = gr.Button("Play", elem_id="serving-play")
            pause_btn = gr.Button("Pause", elem_id="serving-pause")
        status = gr.HTML(status_line_html("press Load to queue the requests"), elem_id="serving-status")
        summary = gr.HTML("", elem_id="serving-summary-box")
        hint = "press Load to queue the requests"
        with gr.Row():
            grid = gr.Plot(empty_figure(hint), elem_id="serving-grid", show_label=False)
            timeline = gr.Plot(empty_figure(hint), elem_id="serving-timeline", show_label=False)
        with gr.Row():
            tokens = gr.Plot(empty_figure(hint), elem_id="serving-tokens", show_label=False)
            roof = gr.Plot(empty_figure(hint), elem_id="serving-roofline", show_label=False)
        table = gr.HTML("", elem_id="serving-table")
        gr.Markdown("### Memory calculator: weights + KV cache of real model configurations")
        configs = [c.repo_id for c in shipped_configs().values()]
        with gr.Row():
            mem_config = gr.Dropdown(configs, value=configs[0], label="config", elem_id="serving-mem-config")
            mem_dtype = gr.Dropdown(MEMORY_DTYPES, value="bf16", label="weights dtype", elem_id="serving-mem-dtype")
            mem_context = slider(MEM_CONTEXT, 4096, 128, "context (tokens)", "serving-mem-context")
            mem_batch = slider(MEM_BATCH, 8, 1, "batch", "serving-mem-batch")
            mem_gib = slider(MEM_GIB, 80, 1, "memory (GiB)", "serving-mem-gib")
        fig0, line0 = memory_view(configs[0], 4096, 8, "bf16", 80)
        mem_fig = gr.Plot(fig0, elem_id="serving-mem-fig", show_label=False)
        mem_line = gr.HTML(line0, elem_id="serving-mem-info")
        build_prefix_compare(ctx)

    outs = [status, summary, grid, timeline, tokens, roof, table]
    report_on_release(max_batch, MAX_BATCH, status, status_line_html)
    report_on_release(n, CONTINUATIONS, status, status_line_html)
    load_btn.click(lambda sid, *a: load(ctx, sid, *a[:-2], prefix_caching=a[-2], prefill_chunk=a[-1]),
                   [ctx.sid, text, max_batch, block_size, pool, n, ctx.chat, ctx.system, ctx.max_new, *ctx.sampling,
                    prefix, chunk],
                   outs, api_visibility="undocumented", **fast)
    step_btn.click(lambda sid: step(ctx, sid), [ctx.sid], outs, api_visibility="undocumented", **fast)

    def play_events(sid: str | None) -> Iterator[tuple]:  # a generator function: Gradio streams each yield
        yield from play(ctx, sid)

    play_btn.click(play_events, [ctx.sid], outs, api_visibility="undocumented", **fast)
    pause_btn.click(lambda sid: pause(ctx, sid), [ctx.sid], None, queue=False, api_visibility="undocumented")
    mem_inputs = [mem_config, mem_context, mem_batch, mem_dtype, mem_gib]
    gr.on([mem_config.change, mem_dtype.change, mem_context.release, mem_batch.release, mem_gib.release],
          memory_view, mem_inputs, [mem_fig, mem_line], trigger_mode="always_last", api_visibility="undocumented",
          **fast)
