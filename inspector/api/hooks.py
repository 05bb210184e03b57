"""Hooks and trace-point names for the Python API: `model.prefill(..., hooks={name: fn})`, and the globs
`run.cache` takes.

A hook is `fn(value, hook)` at a TransformerLens-style trace point (`inspector.engine.trace`): `value` is the
tensor the model made there (the engine's layout: batch first, e.g. `blocks.5.hook_resid_post` (1, T, D),
`blocks.5.attn.hook_q` (1, H, T, d), `blocks.5.attn.hook_z` (1, T, H*d)); `hook` says where it fired
(`HookPoint`: `name`, `step` (0 = the prefill, k = the k-th decode step), `position` (the absolute position of
the value's first position) and `positions`). Returning None only reads; returning a tensor of the same shape
and dtype writes it: the model goes on with it, in this forward and (for keys and values) in the KV cache.
Do not edit `value` in place; return a new tensor. A hook is an intervention of the generation loop
(`inspector.generation.levers`, `sees_place=True`), so it runs in the prefill and every decode step of its run
(and again when the run replays a step, `run.cache`); it belongs to that run only: no hook outlives its run.
A hook that raises stops the forward with one line naming the hook, the point and the step (`HookError`, its
`__cause__` is the hook's own exception); the run stays at its last step, readable and steppable.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from inspector.errors import InputError, InputTypeError, InspectorError, first_line
from inspector.generation.levers import Intervention, Place

# Points whose tensors hold positions on dim 2 (B, heads, T, ...); every other point has them on dim 1.
HEADS_FIRST = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k",
               "attn.hook_q_normed", "attn.hook_k_normed", "attn.hook_attn_scores", "attn.hook_pattern")


class HookError(InspectorError):
    """A hook raised: the message names the hook, its point and the step (the hook's exception is the cause)."""


@dataclass(frozen=True)
class HookPoint:
    """Where a hook fired: the trace point, the step, and the absolute positions the value holds."""

    name: str
    step: int | None  # 0 = the prefill, k = the k-th decode step (None: a forward outside a run's steps)
    position: int  # the absolute position of the value's first position (a decode step: its one token's)
    positions: range  # every absolute position the value holds, in order

    def __repr__(self) -> str:
        return f"<HookPoint {self.name} step {self.step} positions {self.positions.start}..{self.positions.stop - 1}>"


def positions_dim(name: str) -> int:
    """The dim of a trace point's tensor that runs over positions (batch first)."""
    return 2 if name.endswith(HEADS_FIRST) else 1


def nearest(name: str, known: Iterable[str], n: int = 3) -> str:
    """The `n` names closest to `name`, as a phrase for a refusal."""
    close = difflib.get_close_matches(name, list(known), n=n, cutoff=0.5)
    return f"nearest: {', '.join(close)}" if close else "names look like blocks.0.hook_resid_post, hook_embed"


def resolve(patterns: str | Iterable[str], known: list[str]) -> list[str]:
    """The trace points that the names or globs (`blocks.*.hook_resid_post`) match, in the model's emission
    order; InputError for one that matches none, naming the nearest names."""
    if isinstance(patterns, str):
        patterns = [patterns]
    chosen: set[str] = set()
    for p in patterns:
        if not isinstance(p, str):
            raise InputTypeError(f"a trace point name is a string, got {type(p).__name__}")
        hits = fnmatch.filter(known, p) if any(c in p for c in "*?[") else [p] if p in known else []
        if not hits:
            raise InputError(f"no trace point matches {p!r}: {nearest(p, known)}")
        chosen.update(hits)
    if not chosen:
        raise InputError("no trace point named: give names or globs, e.g. blocks.*.hook_resid_post")
    return [n for n in known if n in chosen]


def _label(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def hook_interventions(hooks: Mapping[str, Callable], known: list[str]) -> tuple[Intervention, ...]:
    """The interventions that call each hook at its point (a name, not a glob; InputError naming the
    nearest names for one the model does not emit, InputTypeError for a hook that is not callable)."""
    if not isinstance(hooks, Mapping):
        raise InputTypeError(f"hooks must be a dict {{trace point name: fn(value, hook)}}, got {type(hooks).__name__}")
    out = []
    for name, fn in hooks.items():
        if not isinstance(name, str):
            raise InputTypeError(f"a hook's trace point name is a string, got {type(name).__name__}")
        if name not in known:
            raise InputError(f"no trace point {name!r}: {nearest(name, known)}")
        if not callable(fn):
            raise InputTypeError(f"the hook at {name} must be a function fn(value, hook), got {type(fn).__name__}")
        out.append(Intervention(name, _caller(fn), f"hook {_label(fn)}", sees_place=True))
    return tuple(out)


def _caller(fn: Callable) -> Callable[[torch.Tensor, str, Place], torch.Tensor | None]:
    """`fn` as an intervention function: told its HookPoint, its exception and its answer checked."""
    label = _label(fn)

    def call(value: torch.Tensor, name: str, place: Place) -> torch.Tensor | None:
        T = value.shape[positions_dim(name)]
        where = f"step {place.step}" if place.step is not None else "a forward"
        hook = HookPoint(name, place.step, place.start, range(place.start, place.start + T))
        try:
            out = fn(value, hook)
        except Exception as exc:
            raise HookError(f"hook {label} at {name}, {where}, raised {type(exc).__name__}: {first_line(exc)}") from exc
        if out is None:
            return None
        if not isinstance(out, torch.Tensor):
            raise InputError(f"hook {label} at {name}, {where}, returned {type(out).__name__}: return None (read) "
                             "or a torch tensor of the value's shape and dtype (write)")
        if out.shape != value.shape or out.dtype != value.dtype:
            raise InputError(f"hook {label} at {name}, {where}, returned {tuple(out.shape)} "
                             f"{str(out.dtype).replace('torch.', '')}; the value is {tuple(value.shape)} "
                             f"{str(value.dtype).replace('torch.', '')}")
        return out.to(value.device)

    return call


def hook_names(interventions: Iterable[Any]) -> list[str]:
    """The points of a run's hooks (the interventions that see their place)."""
    return [iv.point for iv in interventions if getattr(iv, "sees_place", False)]
