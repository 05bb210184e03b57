"""One step of a session run again, for what its record does not keep: every trace point's tensor (an
activation cache), or the logits of every position of the prefill.

`replay(session, step, rec)` runs the session's forwards 0..step again into a fresh KV cache, as the session
ran them (the same levers; the prompt, then one decode forward per generated token; or, in a session that
recomputes, the whole sequence in one forward), with `rec` on forward `step` only, and returns that
forward's logits. The session's own cache and records are untouched. The numbers are the step's own: the same
forwards in the same order (interventions and hooks run again: a hook sees that forward a second time, with
the same `Place`). Step 0 costs one forward (the prefill); step k of a cached run k + 1 forwards.
A window over the cache (a policy that evicts by position only) runs again as it ran; a policy that keeps
state of what it saw (H2O, SnapKV) is refused, as is a trace opened without its recording model.
"""

from __future__ import annotations

from typing import Any

import torch

from inspector.engine.trace import Recorder
from inspector.errors import InputError
from inspector.generation import loop


def replay(session: Any, step: int, rec: Recorder | None = None, *, all_positions: bool = False) -> torch.Tensor:
    """Forward `step` run again with `rec` (see the module docstring): fp32 logits (V,) of its last position,
    or (T, V) of each of its positions with `all_positions`."""
    if getattr(session, "read_only", None) is not None:
        raise InputError(session.read_only)
    levers = session._forward_levers()
    if getattr(levers.cache_policy, "observes", False):  # its state is what it saw in the run itself
        raise InputError("running a step again needs a KV-cache policy without state of its own (a window): "
                         f"this run's {type(levers.cache_policy).__name__} keeps what it saw")
    step = session.trace.at(step).record.step
    ids = list(session.prompt_ids) + list(session.generated_ids)
    cache = session.new_cache()
    model = session.model

    def forward(feed: list[int], k: int, r: Recorder | None, every: bool) -> torch.Tensor:
        out = loop.forward(model, cache, [feed], levers, r, all_positions=every, step=k)
        return out[0]

    if step > 0 and session.recompute:  # the step's own forward: the whole sequence before its token
        logits = forward(ids[:len(session.prompt_ids) + step], step, rec, all_positions)
        return logits[-1:] if all_positions else logits
    logits = forward(ids[:len(session.prompt_ids)], 0, rec if step == 0 else None, all_positions and step == 0)
    for k in range(1, step + 1):
        logits = forward([session.generated_ids[k - 1]], k, rec if k == step else None, all_positions and k == step)
    return logits
