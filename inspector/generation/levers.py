"""The three levers of the generation loop, each with a do-nothing default (`Levers()` changes nothing):

1. Logits processors (`processors`): an ordered tuple of named, pure `(ids, logits) -> logits` stages
   (`inspector.engine.processors.LogitsProcessor`), run before the sampling stages on every draw.
2. A KV-cache policy (`cache_policy`): after each forward, which cached positions each layer keeps.
   `CachePolicy.evict(layer, held)` gets the absolute positions a layer still attends to (ascending; the
   newest is the last token written) and returns those to evict now, or None. The policies and their
   optional capabilities (per KV head, observing attention, re-rotating) live in
   `inspector.generation.cache_policies`; `KeepAll` (the default) keeps everything; `SlidingWindow(window,
   sinks)` keeps the first `sinks` positions (attention sinks, as StreamingLLM) and the newest `window`.
3. Interventions (`interventions`): at a TransformerLens-named trace point (`inspector.engine.trace`), a
   function of the tensor there returns the tensor the model goes on with. Applied in every forward of
   the sequence (prefill and each decode step), to what is written into the KV cache too, so a cached run
   equals a full recompute under the same interventions. `Hooks` joins them with a recorder: the
   interventions run first, and the recorder sees what the model goes on with. An intervention's function
   may return None: it only read the tensor, and the model goes on with it unchanged. One made with
   `sees_place=True` is called as `fn(tensor, name, place)`, `place` saying which forward runs (`Place`:
   the step of the generation and the absolute position of the forward's first new token): the Python
   API's hooks (`inspector.api.hooks`) are such interventions.
`check_interventions(interventions, config)` refuses a point the model of that `ModelConfig` does not emit
(InputError): its family's points count (a mixture of experts' router points, Gemma's post-norm points), and a
point its family never fires does not (a mixture of experts has no `mlp.hook_pre` / `mlp.hook_post`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
import torch

from inspector.engine.config import ModelConfig
from inspector.engine.processors import LogitsProcessor
from inspector.generation.cache_policies import (CachePolicy, HeavyHitters, KeepAll, SlidingWindow,  # noqa: F401
                                                SnapKV, make_policy)
from inspector.engine.trace import MLP_HOOKS, MOE_HOOKS, Recorder, model_hook_names, wants
from inspector.errors import InputError


@dataclass(frozen=True)
class Intervention:
    """At trace point `point`, the model goes on with `fn(tensor)` (same shape and dtype) instead of the
    tensor, or with the tensor itself when `fn` returns None; `fn(tensor, point, place)` with `sees_place`."""

    point: str
    fn: Callable[..., torch.Tensor | None]
    label: str = ""
    sees_place: bool = False


@dataclass(frozen=True)
class Place:
    """Where a forward runs: its step in a generation (0 = the prefill; None for a forward outside one) and
    the absolute position of its first new token (the tensors' positions axis starts there)."""

    step: int | None
    start: int


@dataclass(frozen=True)
class Levers:
    processors: tuple[LogitsProcessor, ...] = ()
    cache_policy: CachePolicy = field(default_factory=KeepAll)
    interventions: tuple[Intervention, ...] = ()

    @property
    def evicts(self) -> bool:
        return not isinstance(self.cache_policy, KeepAll)


def check_interventions(interventions: tuple[Intervention, ...], config: ModelConfig) -> None:
    """InputError naming the first point a model of `config` does not emit (and the form its points take)."""
    known = set(model_hook_names(config))
    for iv in interventions:
        if iv.point not in known:
            mlp = (f"; this model's MLP is a mixture of experts: blocks.L.{', '.join(MOE_HOOKS)} instead of "
                   f"{' / '.join(MLP_HOOKS)}" if config.moe else "")
            raise InputError(f"no trace point {iv.point!r}: points are hook_embed, blocks.L.<point> for L in "
                             f"0..{config.num_hidden_layers - 1} (e.g. blocks.0.hook_resid_pre, blocks.0.attn.hook_z), "
                             f"ln_final.hook_normalized, unembed.hook_logits{mlp}")


class Hooks:
    """A recorder that applies interventions first, then shows the result to an inner recorder (or none)."""

    def __init__(self, interventions: tuple[Intervention, ...], rec: Recorder | None = None,
                 place: Place = Place(None, 0)) -> None:
        self.rec, self.place = rec, place
        self.by_point: dict[str, list[Intervention]] = {}
        for iv in interventions:
            self.by_point.setdefault(iv.point, []).append(iv)

    def wants(self, name: str) -> bool:
        return name in self.by_point or wants(self.rec, name)

    def edits(self, name: str) -> bool:
        return name in self.by_point

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor | None:
        out = None
        for iv in self.by_point.get(name, ()):
            current = value if out is None else out
            replaced = iv.fn(current, name, self.place) if iv.sees_place else iv.fn(current)
            if replaced is None:  # it only read the tensor
                continue
            if replaced.shape != value.shape or replaced.dtype != value.dtype:
                raise InputError(f"intervention {iv.label or iv.point} returned shape {tuple(replaced.shape)} "
                                 f"{str(replaced.dtype).replace('torch.', '')} at {name}, which holds "
                                 f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}")
            out = replaced
        if self.rec is not None:
            self.rec(name, value if out is None else out)
        return out
