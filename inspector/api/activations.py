"""`run.cache(names, step=k)`: the full tensors at chosen trace points of one step, as numpy arrays.

The step is run again (`inspector.session.replay`: the same forwards, levers and hooks) with a `Capture`
recorder that keeps one copy of each chosen point's tensor, this run's row, positions first:
`blocks.L.hook_resid_post` (T, D); `blocks.L.attn.hook_q` (T, H, d) (TransformerLens's pos, head, d_head);
`blocks.L.attn.hook_pattern` and `hook_attn_scores` (T, H, S) (S: the keys the step read, every position
before it and its own); `blocks.L.attn.hook_z` (T, H*d); `unembed.hook_logits` (T, V). T is the step's new
positions: every prompt token for step 0, one token for a decode step. Floats come as float32 (a bf16
model's values are exact in float32), expert ids as int64.

Before anything runs, `estimate(...)` counts the bytes the arrays will take from each point's per-position
shape (read once per model from a one-token forward, so every family's points count as the model emits
them); past `max_bytes` the call is refused with both numbers.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import torch

from inspector.api.hooks import positions_dim
from inspector.engine import steps
from inspector.engine.trace import model_hook_names
from inspector.errors import InputError
from inspector.generation import loop
from inspector.units import format_bytes

MAX_BYTES = 4 * 2**30  # run.cache's default cap
KEY_DIM_POINTS = ("attn.hook_attn_scores", "attn.hook_pattern")  # their last dim is the keys read (S)
_SHAPES: "weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[int, ...], int]]]" = weakref.WeakKeyDictionary()


class Capture:
    """A recorder keeping this row's tensor at each wanted point: (T, ...) positions first, the last `keep`
    positions (a recomputing step's new ones), float32 (ints as int64), on the CPU."""

    def __init__(self, names: list[str], keep: int | None = None) -> None:
        self.names, self.keep = set(names), keep
        self.values: dict[str, np.ndarray] = {}

    def wants(self, name: str) -> bool:
        return name in self.names

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name not in self.names:
            return
        x = value[0].movedim(positions_dim(name) - 1, 0)  # (T, ...)
        if self.keep is not None:
            x = x[-self.keep:]
        y = x.detach().to("cpu", torch.float32 if x.is_floating_point() else torch.int64)
        y = y.clone() if y.is_contiguous() else y.contiguous()  # our own copy: never a view of the model's tensor
        self.values[name] = y.numpy()


def point_shapes(model: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """Every trace point -> (its shape per position, positions first dropped, with 1 key for the scores and
    pattern; bytes per element as `Capture` keeps it), from one 1-token forward, kept per model."""
    known = _SHAPES.get(model)
    if known is None:
        class Shapes:
            def __init__(self) -> None:
                self.found: dict[str, tuple[tuple[int, ...], int]] = {}

            def __call__(self, name: str, value: torch.Tensor) -> None:
                shape = tuple(value[0].movedim(positions_dim(name) - 1, 0).shape[1:])
                self.found[name] = (shape, 4 if value.is_floating_point() else 8)

        rec = Shapes()
        loop.forward(model, steps.new_cache(model), [[0]], rec=rec, all_positions=True)
        known = _SHAPES[model] = rec.found
    return known


def estimate(model: Any, names: list[str], positions: int, keys: int) -> int:
    """Bytes `Capture` keeps for `names` over `positions` new positions that read `keys` key positions."""
    shapes = point_shapes(model)
    total = 0
    for name in names:
        shape, size = shapes[name]
        if name.endswith(KEY_DIM_POINTS):
            shape = (*shape[:-1], keys)
        total += positions * math.prod(shape) * size
    return total


def cache(session: Any, names: list[str], step: int, max_bytes: int) -> dict[str, np.ndarray]:
    """{name: array} of forward `step` at the resolved trace points `names` (see the module docstring)."""
    from inspector.session.replay import replay

    rec = session.trace.at(step).record
    need = estimate(session.model, names, rec.n_new, rec.positions.stop)
    if need > max_bytes:
        raise InputError(f"caching {len(names)} trace point{'s' if len(names) > 1 else ''} of step {rec.step} "
                         f"({rec.n_new} positions) needs {format_bytes(need)}; the cap is {format_bytes(max_bytes)}: "
                         "ask for fewer points or raise max_bytes")
    capture = Capture(names, keep=rec.n_new if session.recompute and rec.step > 0 else None)
    replay(session, rec.step, capture, all_positions="unembed.hook_logits" in names)
    return {n: capture.values[n] for n in names}


def known_points(config: Any) -> list[str]:
    """Every trace point a model of this config emits, in order of emission."""
    return model_hook_names(config)
