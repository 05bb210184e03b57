"""A run's interventions described as data: `LeverSpec`, frozen, read and written as JSON by the generic codec
(`inspector.session.codec`), so a trace file keeps what a run was made with and reopening it makes the same
levers again.

The fields are `inspector run`'s intervention flags, checked: heads to ablate as (layer, head) pairs and how
(`ablate`: "zero", or "mean": the head's mean output over the prompt's positions, in a run of the prompt
with the spec's other interventions and without any mean-ablation or hook), MLPs to zero, heads to scale
as (layer, head, factor), and a steering vector (layer, the two prompts, alpha), plus the trace points of
the run's hooks (`hooks`): a hook is a Python function, which a file cannot keep, so only its point is
written and `has_hooks` tells a reader that the run cannot be made again from the file alone.
`interventions(model, encode, prompt_ids)` builds them in the CLI's order: ablated heads, ablated MLPs,
scaled heads, steering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inspector.engine.model import Transformer
from inspector.errors import InputError, InputTypeError
from inspector.generation import interventions as ivs
from inspector.generation.levers import Intervention, Levers

ABLATIONS = ("zero", "mean")


@dataclass(frozen=True)
class LeverSpec:
    ablate_head: tuple[tuple[int, int], ...] = ()  # (layer, head), each >= 0
    ablate: str = "zero"  # how ablate_head ablates: "zero" | "mean"
    ablate_mlp: tuple[int, ...] = ()
    scale_head: tuple[tuple[int, int, float], ...] = ()  # (layer, head, factor)
    steer: int | None = None  # the layer steered at (blocks.L.hook_resid_pre)
    steer_towards: str | None = None
    steer_away: str | None = None
    steer_alpha: float = 4.0
    hooks: tuple[str, ...] = ()  # trace points of the run's hooks (their functions are not kept)

    @property
    def is_empty(self) -> bool:
        return self == LeverSpec()

    @property
    def has_hooks(self) -> bool:
        return bool(self.hooks)

    def check(self) -> None:
        """InputError for a spec whose parts do not go together (the ranges are checked when built)."""
        if not isinstance(self.ablate, str):
            raise InputTypeError(f"ablate must be one of {', '.join(ABLATIONS)} (a string), got {type(self.ablate).__name__}")
        if self.ablate not in ABLATIONS:
            raise InputError(f"ablate must be one of {', '.join(ABLATIONS)}, got {self.ablate!r:.40}")
        if self.ablate == "mean" and not self.ablate_head:
            raise InputError("ablate='mean' mean-ablates heads: give ablate_head too (ablate_mlp always zeroes)")
        if self.steer is not None and not ((self.steer_towards or "").strip() and (self.steer_away or "").strip()):
            raise InputError("steer needs two non-empty prompts: steer_towards and steer_away")
        if self.steer is None and (self.steer_towards or self.steer_away):
            raise InputError("steer_towards / steer_away need steer=L (the layer to steer at)")

    def interventions(self, model: Transformer, encode: Callable[[str], list[int]],
                      prompt_ids: Sequence[int]) -> tuple[Intervention, ...]:
        """The interventions, checked against the model (InputError naming the allowed range)."""
        self.check()
        cfg = model.config
        out: list[Intervention] = []
        for layer, head in (() if self.ablate == "mean" else self.ablate_head):
            out += ivs.head(cfg, layer, head, "zero")
        for layer in self.ablate_mlp:
            out += ivs.component(cfg, "mlp_out", layer, "zero")
        for layer, head, factor in self.scale_head:
            out += ivs.head(cfg, layer, head, "scale", factor=factor)
        if self.steer is not None:
            vec = ivs.steering_vector(model, encode(self.steer_towards.strip()), encode(self.steer_away.strip()),
                                      self.steer)
            out += ivs.steer(cfg, self.steer, vec, self.steer_alpha)
        if self.ablate == "mean":
            others = Levers(interventions=tuple(out))
            means = [ivs.head(cfg, layer, head, "mean", mean=ivs.head_mean(model, prompt_ids, layer, head, others))
                     for layer, head in self.ablate_head]
            out = [iv for m in means for iv in m] + out
        return tuple(out)
