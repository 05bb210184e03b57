"""Browser and API inputs -> validated engine settings, with one readable message per bad value (ValueError).

Values come from sliders and number boxes, but the script API (gradio_client, raw JSON) can send anything
JSON holds: numeric strings, huge integers, NaN and Infinity, booleans, lists. A number is taken from an
int or float (not a bool) or a string holding one; whole-number fields keep big integers exact (a seed
of 2**70 stays that seed instead of being rounded through a float).
"""

from __future__ import annotations

import math
from typing import Any

from inspector.engine.config import SamplingParams


SHOWN_CHARS = 40  # a bad value is quoted in the message up to this many characters


def shown(v: Any) -> str:
    """`repr(v)` cut to SHOWN_CHARS: a pasted page in a number box gives a short message."""
    text = repr(v)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def _number(name: str, v: Any, whole: bool) -> int | float:
    """`v` as a finite number (an int when `whole`); ValueError naming `name` otherwise."""
    if v is None or (isinstance(v, str) and not v.strip()):
        raise ValueError(f"{name} is empty: enter a number")
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{name} must be a number, got {shown(v)}")
    x: int | float = v
    if isinstance(v, str):
        text = v.strip()
        try:
            x = int(text) if whole else float(text)
        except ValueError:  # not a number, or "2.0" / "1e3" for a whole-number field
            try:
                x = float(text)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {shown(v)}") from None
    if isinstance(x, int):
        if whole:
            return x
        try:
            return float(x)
        except OverflowError:  # JSON allows any number of digits
            raise ValueError(f"{name} must be a finite number, got {shown(v)}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {shown(v)}")
    if whole:
        if not x.is_integer():
            raise ValueError(f"{name} must be a whole number, got {shown(v)}")
        return int(x)
    return x


def parse_params(temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any) -> SamplingParams:
    """Sampling controls -> validated SamplingParams; ValueError with a readable message otherwise."""
    params = SamplingParams(temperature=_number("temperature", temperature, whole=False),
                            top_k=int(_number("top-k", top_k, whole=True)),
                            top_p=_number("top-p", top_p, whole=False), min_p=_number("min-p", min_p, whole=False),
                            seed=int(_number("seed", seed, whole=True)))
    params.validate()
    return params
