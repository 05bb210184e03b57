"""Browser inputs -> validated engine settings, with one readable message per bad value (ValueError)."""

from __future__ import annotations

from typing import Any

from inspector.engine.config import SamplingParams


def parse_params(temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any) -> SamplingParams:
    """Sampling controls -> validated SamplingParams; ValueError with a readable message otherwise."""
    def num(name: str, v: Any, cast):
        if v is None or (isinstance(v, str) and not v.strip()):
            raise ValueError(f"{name} is empty: enter a number")
        try:
            out = cast(float(v))
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {v!r}") from None
        if cast is int and float(v) != int(float(v)):
            raise ValueError(f"{name} must be a whole number, got {v!r}")
        return out

    params = SamplingParams(temperature=num("temperature", temperature, float), top_k=num("top-k", top_k, int),
                            top_p=num("top-p", top_p, float), min_p=num("min-p", min_p, float),
                            seed=num("seed", seed, int))
    params.validate()
    if params.seed < 0:
        raise ValueError(f"seed must be >= 0, got {params.seed}")
    return params
