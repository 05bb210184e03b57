"""The intervention keywords of `Model.prefill` in Python's own forms, turned into the CLI flags' forms that
`RunRequest.from_keywords` (`inspector.generation.request`) checks: a head is (layer, head) or "L.H"
(`ablate_head=(5, 3)` is one head, `[(5, 3), (6, 1)]` two), a scaled head (layer, head, factor) or "L.H=F", a layer an int (numpy's too) or
its text; a negative layer or head counts from the end, as in Python. Anything else is passed on as
given, for the flag's own check to refuse in one line.
"""

from __future__ import annotations

import numbers
from typing import Any

from inspector.api.args import index


def _layer(value: Any, cfg: Any) -> Any:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return index(value, "layer", cfg.num_hidden_layers)
    return value


def _head(value: Any, cfg: Any) -> Any:
    if isinstance(value, (tuple, list)) and len(value) in (2, 3):
        layer = index(value[0], "layer", cfg.num_hidden_layers)
        head = index(value[1], "head", cfg.num_attention_heads)
        return f"{layer}.{head}" if len(value) == 2 else f"{layer}.{head}={value[2]}"
    return value


def _heads(value: Any, cfg: Any, width: int) -> Any:
    """One head (a tuple of `width` numbers, or text) or a list of them, as the flag's list of texts."""
    one = isinstance(value, tuple) and len(value) == width and all(isinstance(v, numbers.Number) for v in value)
    items = [value] if one or isinstance(value, str) else value
    return [_head(v, cfg) for v in items] if isinstance(items, (list, tuple)) else value


def normalized(levers: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """The keywords with heads and layers in the flags' forms (see the module docstring)."""
    out = dict(levers)
    if "ablate_head" in out:
        out["ablate_head"] = _heads(out["ablate_head"], cfg, 2)
    if "scale_head" in out:
        out["scale_head"] = _heads(out["scale_head"], cfg, 3)
    if "ablate_mlp" in out:
        v = out["ablate_mlp"]
        out["ablate_mlp"] = [_layer(x, cfg) for x in v] if isinstance(v, (list, tuple)) else _layer(v, cfg)
    if out.get("steer") is not None:
        out["steer"] = _layer(out["steer"], cfg)
    return out
