"""The Python API's argument rules, in one place: indices as in Python, token ids, and the one refusal rule.

Every refusal is an `inspector.InputError` (a `ValueError`) with one line naming the argument, what it
takes and what was given; a value of the wrong type is an `InputTypeError` (an `InputError` that is a
`TypeError` too). An index (a step, a layer, a head, a position) is an int or a numpy integer, never a
bool, a float or a string, and a negative one counts from the end as in Python: `index(-1, "layer", 30)`
is 29. Token ids are ints or numpy integers from 0 to the model's vocabulary size less one.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

from inspector.errors import InputError, InputTypeError
from inspector.validate import shown


def integer(value: Any, name: str) -> int:
    """`value` as an int: an int or a numpy integer (not a bool); InputTypeError otherwise."""
    if value is None:
        raise InputTypeError(f"{name} is empty: give an int")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"{name} must be an int, got {type(value).__name__} {shown(value)}")
    return int(value)


def index(value: Any, name: str, count: int) -> int:
    """`value` as an index into `count` items (negative from the end, as in Python), from 0 to count - 1."""
    i = integer(value, name)
    if count <= 0:
        raise InputError(f"no {name} {i}: there are none")
    if not -count <= i < count:
        raise InputError(f"{name} must be a whole number from {-count} to {count - 1}, got {i}")
    return i % count


def token_ids(ids: Any, vocab_size: int, name: str = "ids", allow_empty: bool = False) -> list[int]:
    """A non-empty (or, with `allow_empty`, any) sequence of token ids (ints or numpy integers, a numpy array
    too) as a list of ints."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InputTypeError(f"{name} must be a list of token ids (ints), got {type(ids).__name__}")
    out = []
    for i in (ids.tolist() if hasattr(ids, "tolist") else ids):
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise InputTypeError(f"{name} must hold token ids (ints), got {type(i).__name__} {shown(i)}")
        if not 0 <= i < vocab_size:
            raise InputError(f"token ids are whole numbers from 0 to {vocab_size - 1}, got {int(i)}")
        out.append(int(i))
    if not out and not allow_empty:
        raise InputError(f"{name} is empty: give at least one token id")
    return out


def text_or_ids(text: Any, ids: Any, name: str = "prompt") -> None:
    """Exactly one of `text` and `ids` given; InputError otherwise (InputTypeError for text not a string)."""
    if (text is None) == (ids is None):
        raise InputError(f"give either {name} (text) or ids= (token ids), not {'both' if text is not None else 'neither'}")
    if text is not None and not isinstance(text, str):
        raise InputTypeError(f"{name} must be a string (or give token ids as ids=), got {type(text).__name__}")
