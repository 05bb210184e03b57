"""Per-operation timing of one step of a session: `time_step_ops(session, step, repeats) -> OpTiming`.

The step's forward runs again, on a fresh KV cache holding the positions before it (prefilled untimed),
with `inspector.engine.optiming.OpTimer` as the recorder, under the session's levers (interventions and
cache policy included), `repeats` times (the cache cut back to the context between runs); the draw of its
token is timed too, with the step's own sampling settings. Per layer and operation the median over the
runs is kept, with the bytes it reads and its FLOPs. The session's own cache, records and tokens are not
touched: the timing is an extra run, opt-in (the timer synchronises a GPU at every point, so a timed step
is slower than an untimed one, and the timer keeps no tensor).
"""

from __future__ import annotations

import statistics
import time

import torch

from inspector.engine.optiming import OpTimer, op_table, totals
from inspector.engine.sampling import generator_for, sample
from inspector.errors import InputError
from inspector.generation import loop
from inspector.session.records import OpRow, OpTiming

MAX_REPEATS = 20


@torch.inference_mode()
def time_step_ops(session, step: int = -1, repeats: int = 3) -> OpTiming:
    """Time step `step` (0 = the prefill, -1 = the newest) operation by operation; see the module docstring."""
    if not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"repeats must be 1..{MAX_REPEATS}, got {repeats}")
    if getattr(session, "read_only", None):
        raise InputError(session.read_only)
    forward = session.trace.at(step)
    rec = forward.record
    model, levers = session.model, session.levers
    ids = list(session.prompt_ids) + list(session.generated_ids)
    context = ids[:rec.start_pos]
    cache = session.new_cache()
    if context:
        loop.forward(model, cache, [context], levers)  # the positions before the step, untimed
    device = str(next(model.parameters()).device)
    elem = next(model.parameters()).element_size()
    runs: list[list[OpRow]] = []
    for _ in range(repeats + 1):  # the first run warms up (allocations, kernel choice) and is dropped
        cache.truncate(len(context))
        timer = OpTimer(device)
        timer.start()
        logits = loop.forward(model, cache, [rec.token_ids], levers, timer)[0]
        params = rec.sample.params if rec.sample is not None else None
        sampling_s = None
        if params is not None:
            t0 = time.perf_counter()
            sample(logits, params, generator_for(params.seed, rec.start_pos + rec.n_new),
                   ids=ids[:rec.start_pos + rec.n_new], processors=levers.processors)
            sampling_s = time.perf_counter() - t0
        table = op_table(session.config, timer, rec.n_new, len(context), elem, sampling_s)
        runs.append([OpRow(r.layer, r.op, r.seconds, r.bytes_read, r.flops) for r in table])
    kept = runs[1:]
    rows = [OpRow(r.layer, r.op, statistics.median(run[i].seconds for run in kept), r.bytes_read, r.flops)
            for i, r in enumerate(kept[0])]
    summed = [OpRow(None, t.op, t.seconds, t.bytes_read, t.flops) for t in totals(rows)]
    return OpTiming(rec.step, rec.kind, rec.n_new, len(context), device,
                    str(next(model.parameters()).dtype).removeprefix("torch."), repeats, rows, summed)
