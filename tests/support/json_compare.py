"""Comparing what the API returns with what the CLI prints with --json: `untimed` drops the wall-clock
fields, `same` compares structures with floats within a tolerance."""

from __future__ import annotations

import math


TIMINGS = {"seconds", "seconds_full", "seconds_forward", "seconds_backward", "timings", "forward_ms", "sample_ms",
           "tpot_ms", "ttft_ms", "prefill_ms", "tokenize_ms", "draft_ms", "verify_ms"}


def untimed(obj):
    """`obj` without its wall-clock fields (they differ between any two runs)."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if k not in TIMINGS}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj


def same(a, b, tol: float = 1e-5) -> bool:
    """Equal structures, floats within `tol` (JSON round trip of float32 sums)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    return a == b
