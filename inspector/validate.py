"""The one way in for every number a user gives: UI boxes and sliders, CLI flags, the script API, run
links and trace files all parse through `whole` and `real`, which raise `InputError` with one line naming
the field, the allowed range and what was given ("top-p must be a number in (0, 1], got 'abc'").

A number is taken from an int or float (numpy's too; not a bool) or a string holding one; None and blank strings are
"empty". Whole-number fields keep big integers exact (a seed of 2**70 stays that seed, not a float's
rounding of it); "2.0" and 2.0 are accepted as the whole number 2. NaN, infinities and floats past the
double range ("1e309") are refused. Values outside the range are refused, never clamped.

`Bound` describes a field once (name, whole or real, range); `Bound.parse(value)` parses one value and
`Bound.argparse` gives the same check as an argparse `type=` (one-line usage error, exit 2). The refusal is a
`NumberError`: an InputError, and a ValueError too, for callers written against plain Python parsing.
The sampling settings' engine ranges are here (TEMPERATURE ... SEED, `SAMPLING`): `SamplingParams.validate`
checks them, and a front end narrows them to what its controls show (`Bound.within`).
This module imports no layer of the package, so every layer may use it.
"""

from __future__ import annotations

import argparse
import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

from inspector.errors import InputError

class NumberError(InputError, ValueError):
    """A refused number: the one-line message names the field, the allowed values and what was given."""


SHOWN_CHARS = 40  # a bad value is quoted in the message up to this many characters


def shown(v: Any) -> str:
    """`repr(v)` cut to SHOWN_CHARS: a pasted page in a number box gives a short message."""
    text = repr(v)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def _fmt(x: float | int) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def describe(whole: bool, lo: float | int | None, hi: float | int | None, lo_open: bool = False,
             hi_open: bool = False) -> str:
    """The allowed values in words: 'a whole number from 1 to 16', 'a number in (0, 1]', 'a number >= 0'."""
    kind = "a whole number" if whole else "a number"
    if lo is not None and hi is not None:
        if whole and not lo_open and not hi_open:
            return f"{kind} from {_fmt(lo)} to {_fmt(hi)}"
        return f"{kind} in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {_fmt(lo)}"
    if hi is not None:
        return f"{kind} {'<' if hi_open else '<='} {_fmt(hi)}"
    return kind


@dataclass(frozen=True)
class Bound:
    """One numeric field: its name as the user sees it, whole or real, and its allowed range."""

    name: str
    whole: bool
    lo: float | int | None = None
    hi: float | int | None = None
    lo_open: bool = False  # True: lo itself is not allowed
    hi_open: bool = False
    note: str = ""  # appended to the range in messages, e.g. "(0 = off)"
    least_nonzero: float | int | None = None  # 0 is allowed, then nothing below this (lo must be 0)

    @property
    def allowed(self) -> str:
        if self.least_nonzero is None:
            text = describe(self.whole, self.lo, self.hi, self.lo_open, self.hi_open)
        else:
            text = f"0 or {describe(self.whole, self.least_nonzero, self.hi, False, self.hi_open)}"
        return f"{text} {self.note}" if self.note else text

    def within(self, lo: float | int | None = None, hi: float | int | None = None) -> "Bound":
        """The same field with a narrower range (a control that shows less than the engine takes)."""
        return replace(self, lo=self.lo if lo is None else lo, hi=self.hi if hi is None else hi)

    def refuse(self, v: Any) -> NumberError:
        return NumberError(f"{self.name} must be {self.allowed}, got {shown(v)}")

    def parse(self, v: Any) -> int | float:
        """`v` as a number in range (an int when whole); InputError naming field, range and value otherwise."""
        if v is None or (isinstance(v, str) and not v.strip()):
            raise NumberError(f"{self.name} is empty: enter {self.allowed}")
        x = _to_number(v, self.whole)
        if x is None:
            raise self.refuse(v)
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            raise self.refuse(v)
        if self.hi is not None and (x > self.hi or (self.hi_open and x == self.hi)):
            raise self.refuse(v)
        if self.least_nonzero is not None and 0 < x < self.least_nonzero:
            raise self.refuse(v)
        return x

    def argparse(self, text: str) -> int | float:
        """An argparse `type=`: the same check, reported as a usage error."""
        try:
            return self.parse(text)
        except NumberError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


def _to_number(v: Any, whole: bool) -> int | float | None:
    """`v` as a finite int (whole) or float; None when it is not one. numpy's integers and floats count as
    Python's (`numbers.Integral` / `numbers.Real`)."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Real, str)):
        return None
    if not isinstance(v, (int, float, str)):  # numpy's scalars (np.int64, np.float32): as their Python value
        v = int(v) if isinstance(v, numbers.Integral) else float(v)
    x: int | float = v
    if isinstance(v, str):
        text = v.strip()
        try:
            x = int(text) if whole else float(text)
        except ValueError:  # not a number, or "2.0" / "1e3" for a whole-number field
            try:
                x = float(text)
            except ValueError:
                return None
    if isinstance(x, int):
        if whole:
            return x
        try:
            return float(x)
        except OverflowError:  # JSON and Python allow any number of digits
            return None
    if not math.isfinite(x):
        return None
    if whole:
        return int(x) if x.is_integer() else None
    return x


def whole(v: Any, name: str, lo: int | None = None, hi: int | None = None, note: str = "") -> int:
    """`v` as a whole number in [lo, hi] (either bound optional); InputError otherwise."""
    return int(Bound(name, True, lo, hi, note=note).parse(v))


def real(v: Any, name: str, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
         hi_open: bool = False, note: str = "") -> float:
    """`v` as a finite number in the range (bounds optional, each closed unless open); InputError otherwise."""
    return float(Bound(name, False, lo, hi, lo_open, hi_open, note).parse(v))


# The sampling settings as the engine takes them (inspector.engine.config.SamplingParams).
# The smallest temperature above 0 (greedy). Sampling divides fp32 logits by T: below about 1e-36 a logit
# of 10 overflows to inf (and the softmax gives NaN); 1e-6 leaves any real logit far inside fp32's range,
# and a temperature that small already picks the argmax unless logits tie.
MIN_TEMPERATURE = 1e-6
TEMPERATURE = Bound("temperature", False, 0.0, note="(0 = greedy)", least_nonzero=MIN_TEMPERATURE)
TOP_K = Bound("top-k", True, 0, note="(0 = off)")
TOP_P = Bound("top-p", False, 0.0, 1.0, lo_open=True, note="(1 = off)")
MIN_P = Bound("min-p", False, 0.0, 1.0, hi_open=True, note="(0 = off)")
SEED = Bound("seed", True, 0)
SAMPLING = (TEMPERATURE, TOP_K, TOP_P, MIN_P, SEED)  # in SamplingParams' field order
