"""Named interventions: constructors that build `Intervention`s at TransformerLens points, validated.

Each constructor checks its layer, head and positions against the model's config and raises InputError
with one line naming the allowed values; each returns a tuple of `Intervention`s (a whole-layer or
all-layers operation is several) with a label saying what it changed ("head 5.3 off"). Every function
returns a new tensor (never edits in place), so the same intervention applies to a prefill, a decode
step and a full recompute alike, and cached decoding equals recomputation under it.

- `head(cfg, layer, head, "zero"|"scale"|"mean", factor=, mean=)`: one attention head's output at
  `blocks.L.attn.hook_z` (B, T, H*d), head h being columns h*d..(h+1)*d. Mean-ablation replaces the head's
  output by a fixed vector: `head_mean(model, prompt_ids, layer, head, levers)` is the mean of that head's
  z over the prompt's positions, in a run of the prompt with `levers` (the run's other interventions)
  and without this one; fixed once, so every step and a recompute use the same vector.
- `component(cfg, "attn_out"|"mlp_out", layer, "zero"|"scale", factor=)`: a whole attention or MLP output.
- `block_attention(cfg, query, key, layer=None)`: the query at absolute position `query` may not read
  the key at `key` (scores set to -inf at `blocks.L.attn.hook_attn_scores`, every head; every layer when
  `layer` is None). A forward's new positions are the last T of its S key positions (a decode step: T = 1,
  the query at the cache length), which holds for one sequence without a KV-cache policy.
- `steer(cfg, layer, vector, alpha)`: adds alpha * vector at `blocks.L.hook_resid_pre`, every position of
  every forward (the prompt's and each decode step's); `steering_vector(model, towards, away, layer,
  levers)` is mean resid_pre of the first prompt minus that of the second, at that layer.
`parse_head(text, cfg)` reads "L.H" and `parse_scaled_head(text, cfg)` "L.H=F" (the CLI's forms).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.engine import steps
from inspector.engine.config import ModelConfig
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.levers import Intervention, Levers, check_interventions
from inspector.validate import Bound

HEAD_OPS = ("zero", "scale", "mean")
COMPONENTS = ("attn_out", "mlp_out")
COMPONENT_OPS = ("zero", "scale")
FACTOR = Bound("factor", False, -100, 100)
ALPHA = Bound("steering alpha", False, -1000, 1000)


def check_layer(cfg: ModelConfig, layer: object) -> int:
    return int(Bound("layer", True, 0, cfg.num_hidden_layers - 1).parse(layer))


def check_head(cfg: ModelConfig, head: object) -> int:
    return int(Bound("head", True, 0, cfg.num_attention_heads - 1).parse(head))


def _choice(value: str, allowed: Sequence[str], what: str) -> str:
    if value not in allowed:
        raise InputError(f"unknown {what} {value!r}: use one of {', '.join(allowed)}")
    return value


def _put_columns(z: torch.Tensor, lo: int, hi: int, value: torch.Tensor) -> torch.Tensor:
    """z (B, T, H*d) with columns lo..hi-1 replaced by `value` (broadcast), as a new tensor."""
    return torch.cat([z[..., :lo], value.to(z.dtype).expand(*z.shape[:-1], hi - lo), z[..., hi:]], dim=-1)


def head(cfg: ModelConfig, layer: object, head_index: object, op: str = "zero", *, factor: object = 0.0,
         mean: torch.Tensor | None = None) -> tuple[Intervention, ...]:
    """Zero, scale or mean-ablate head `head_index` of `layer` (see the module docstring)."""
    L, h, d = check_layer(cfg, layer), check_head(cfg, head_index), cfg.head_dim
    op = _choice(op, HEAD_OPS, "head operation")
    lo, hi = h * d, (h + 1) * d
    point = f"blocks.{L}.attn.hook_z"
    if op == "zero":
        return (Intervention(point, lambda z: _put_columns(z, lo, hi, z.new_zeros(())), f"head {L}.{h} off"),)
    if op == "scale":
        f = float(FACTOR.parse(factor))
        return (Intervention(point, lambda z: _put_columns(z, lo, hi, z[..., lo:hi] * f), f"head {L}.{h} ×{f:g}"),)
    if mean is None or tuple(mean.shape) != (d,):
        raise InputError(f"mean-ablating head {L}.{h} needs its mean output, a vector of {d} (head_mean)")
    fixed = mean.detach().clone()
    return (Intervention(point, lambda z: _put_columns(z, lo, hi, fixed), f"head {L}.{h} mean"),)


def component(cfg: ModelConfig, point: str, layer: object, op: str = "zero", *,
              factor: object = 0.0) -> tuple[Intervention, ...]:
    """Zero or scale a whole attention output or MLP output of `layer`."""
    point = _choice(point, COMPONENTS, "component")
    L = check_layer(cfg, layer)
    op = _choice(op, COMPONENT_OPS, f"{point} operation")
    f = 0.0 if op == "zero" else float(FACTOR.parse(factor))
    name = "attention" if point == "attn_out" else "MLP"
    label = f"{name} {L} off" if op == "zero" else f"{name} {L} ×{f:g}"
    return (Intervention(f"blocks.{L}.hook_{point}", lambda x: x * f, label),)


def block_attention(cfg: ModelConfig, query: object, key: object, layer: object | None = None
                    ) -> tuple[Intervention, ...]:
    """The query at position `query` does not read the key at position `key` (every head; one layer or all)."""
    q = int(Bound("query position", True, 0, cfg.max_position_embeddings - 1).parse(query))
    k = int(Bound("key position", True, 0, q).parse(key))
    if q == 0:
        raise InputError("the query at position 0 reads only itself: block a query at position 1 or later")
    layers = range(cfg.num_hidden_layers) if layer is None else [check_layer(cfg, layer)]

    def fn(scores: torch.Tensor) -> torch.Tensor:
        T, S = scores.shape[-2], scores.shape[-1]
        i = q - (S - T)  # the query's index among this forward's new positions
        if not 0 <= i < T:
            return scores
        mask = torch.zeros(T, S, dtype=torch.bool, device=scores.device)
        mask[i, k] = True
        return scores.masked_fill(mask, float("-inf"))

    where = "every layer" if layer is None else f"layer {layers[0]}"
    return tuple(Intervention(f"blocks.{L}.attn.hook_attn_scores", fn, f"{q}↛{k} at {where}") for L in layers)


def steer(cfg: ModelConfig, layer: object, vector: torch.Tensor, alpha: object) -> tuple[Intervention, ...]:
    """Add alpha * vector (D,) to the residual stream entering `layer`, at every position."""
    L = check_layer(cfg, layer)
    a = float(ALPHA.parse(alpha))
    if tuple(vector.shape) != (cfg.hidden_size,):
        raise InputError(f"a steering vector has {cfg.hidden_size} numbers, got shape {tuple(vector.shape)}")
    add = (a * vector.detach().float()).clone()
    return (Intervention(f"blocks.{L}.hook_resid_pre", lambda x: x + add.to(x.dtype), f"steer {L} α={a:g}"),)


class _Grab:
    """A recorder that keeps one trace point's tensor of one forward."""

    def __init__(self, name: str) -> None:
        self.name, self.value = name, None

    def wants(self, name: str) -> bool:
        return name == self.name

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name == self.name:
            self.value = value.detach().float().clone()


def _point_mean(model: Transformer, ids: Sequence[int], point: str, levers: Levers) -> torch.Tensor:
    """The mean over the prompt's positions of trace point `point` (1, T, X) in a run of `ids`: (X,)."""
    if not ids:
        raise InputError("the prompt is empty: give it some text")
    check_interventions(levers.interventions, model.config)
    grab = _Grab(point)
    loop.forward(model, steps.new_cache(model), [list(ids)], levers, grab)
    return grab.value[0].mean(dim=0)


def head_mean(model: Transformer, prompt_ids: Sequence[int], layer: object, head_index: object,
              levers: Levers = Levers()) -> torch.Tensor:
    """The head's mean output (d,) over the prompt's positions (what mean-ablation puts in its place)."""
    cfg = model.config
    L, h, d = check_layer(cfg, layer), check_head(cfg, head_index), cfg.head_dim
    return _point_mean(model, prompt_ids, f"blocks.{L}.attn.hook_z", levers)[h * d:(h + 1) * d]


def steering_vector(model: Transformer, towards_ids: Sequence[int], away_ids: Sequence[int], layer: object,
                    levers: Levers = Levers()) -> torch.Tensor:
    """Mean resid_pre at `layer` over the `towards` prompt minus that over the `away` prompt (D,)."""
    L = check_layer(model.config, layer)
    if not towards_ids or not away_ids:
        raise InputError("steering needs two non-empty prompts: --steer-towards TEXT and --steer-away TEXT")
    point = f"blocks.{L}.hook_resid_pre"
    return _point_mean(model, towards_ids, point, levers) - _point_mean(model, away_ids, point, levers)


def parse_head(text: str, cfg: ModelConfig) -> tuple[int, int]:
    """"L.H" -> (layer, head), both checked."""
    parts = str(text).strip().split(".")
    if len(parts) != 2:
        raise InputError(f"a head is LAYER.HEAD (e.g. 5.3), got {str(text)[:40]!r}")
    return check_layer(cfg, parts[0]), check_head(cfg, parts[1])


def parse_scaled_head(text: str, cfg: ModelConfig) -> tuple[int, int, float]:
    """"L.H=F" -> (layer, head, factor), all checked."""
    spec, sep, factor = str(text).partition("=")
    if not sep:
        raise InputError(f"a scaled head is LAYER.HEAD=FACTOR (e.g. 5.3=0.5), got {str(text)[:40]!r}")
    L, h = parse_head(spec, cfg)
    return L, h, float(FACTOR.parse(factor))
