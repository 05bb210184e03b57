"""A scheduler's state as the plain records the Serving view draws (`inspector.serving.results`).

- `block_grid(cache)`: for every pool block, the sequences whose block tables hold it.
- `timelines(sched, labels)`: each request's state at every engine step so far, read from the step records:
  "prefill" in a step where it fed prompt (or recompute) tokens, or where it was forked from a prefilled
  prompt (parallel sampling); "decode" where it fed one generated token; "preempted" in the step that
  evicted it; "finished" after the step it finished in; "waiting" between arrival and admission (or
  readmission); "" before its arrival step. A refused request has "" everywhere and says so in its label.
- `serving_view(sched, labels, peaks)`: both, with the step records and the peaks, as one `ServingView`.
- `throughput(steps)`: generated tokens and tokens/s over the steps' wall time.
- `memory_bars(name, context, batch, dtype, memory_bytes)`: the memory calculator's two bars for a shipped
  configuration, the model as published (GQA when it has fewer KV heads than query heads) and the same
  model with full multi-head KV (`inspector.serving.memory`); InputError on an unknown name or bad numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from inspector.serving.memory import estimate, resolve_config, with_full_mha
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.results import BlockGrid, MemoryBar, Peaks, RequestTimeline, ServingView, Status, StepRecord
from inspector.serving.scheduler import Scheduler


def block_grid(cache: PagedKVCache) -> BlockGrid:
    owners: list[list[int]] = [[] for _ in range(cache.manager.num_blocks)]
    for request_id, table in sorted(cache.tables.items()):
        for block in table.blocks:
            owners[block].append(request_id)
    return BlockGrid(cache.block_size, tuple(tuple(o) for o in owners))


def _states(request_id: int, arrival: int, steps: Sequence[StepRecord]) -> tuple[str, ...]:
    out, done = [], False
    for rec in steps:
        kind = next((r.kind for r in rec.rows if r.request_id == request_id), None)
        if done:
            state = "finished"
        elif rec.step < arrival:
            state = ""
        elif request_id in rec.preempted:
            state = "preempted"
        elif kind is not None:
            state = kind
        elif request_id in rec.new_tokens:
            state = "prefill"  # a fork: its first token came from the shared prompt's prefill
        else:
            state = "waiting"
        out.append(state)
        done = done or request_id in rec.finished
    return tuple(out)


def timelines(sched: Scheduler, labels: Sequence[str] | None = None) -> list[RequestTimeline]:
    """One timeline per sequence, in submission order; `labels[i]` names sequence i (default "#i")."""
    out = []
    for req in sched.requests:
        label = labels[req.request_id] if labels is not None else f"#{req.request_id}"
        if req.status is Status.REFUSED:
            out.append(RequestTimeline(req.request_id, f"{label} (refused)", ("",) * len(sched.records)))
            continue
        out.append(RequestTimeline(req.request_id, label, _states(req.request_id, req.arrival_step, sched.records),
                                   len(req.output_ids)))
    return out


def throughput(steps: Sequence[StepRecord]) -> tuple[int, float | None]:
    """(tokens generated, tokens per second of wall time over these steps; None before any time passed)."""
    tokens = sum(len(r.new_tokens) for r in steps)
    seconds = sum(r.elapsed_ms for r in steps) / 1e3
    return tokens, (tokens / seconds if seconds > 0 else None)


def serving_view(sched: Scheduler, labels: Sequence[str] | None = None, peaks: Peaks | None = None) -> ServingView:
    return ServingView(list(sched.records), block_grid(sched.cache), timelines(sched, labels), peaks)


def memory_bars(name: str, context: int, batch: int, dtype: str, memory_bytes: int | None = None) -> list[MemoryBar]:
    cfg = resolve_config(name).config
    bars = []
    for label, c in ((f"as published ({cfg.num_key_value_heads} KV heads)", cfg),
                     (f"full MHA ({cfg.num_attention_heads} KV heads)", with_full_mha(cfg))):
        e = estimate(c, context, batch, dtype, memory_bytes=memory_bytes)
        bars.append(MemoryBar(label, e.weight_bytes, e.kv_bytes, e.fits_requests))
    return bars
