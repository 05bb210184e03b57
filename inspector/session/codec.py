"""Dataclasses to JSON and back by their field types: one function each way, no per-record code.

`to_json(obj, arrays)` gives plain JSON values: a dataclass becomes a dict of its fields in order, lists and
tuples lists, dicts dicts, enums their value, numpy scalars Python numbers. A numpy array field is left out
of the JSON and put into `arrays` under its dotted path ("forwards.3.resid_pre"), which is how a trace
file stores arrays: as tensors beside the JSON document.

`from_json(tp, data, arrays=, ranges=)` builds a value of type `tp` (a dataclass, `list[X]`, `tuple[X, ...]`
or `tuple[X, Y]`, `dict[K, V]`, `X | None`, an enum, int, float, str, bool, Any) from what `to_json` wrote,
taking each array field from `arrays` by its path. Nothing is trusted: every number goes through
`inspector.validate` (a JSON number, finite, in the range `ranges` gives its field name, else a whole
number >= 0 or any finite real), strings and bools are checked, a missing field takes its default or is
an error. Any mismatch raises one `InputError` line naming the path ("forwards.2.step must be a whole
number >= 0, got -5"). Fields are read through `typing.get_type_hints`, so string annotations work.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from inspector.errors import InputError
from inspector.validate import Bound, shown

_PLAIN = {str, int, float, bool, type(None)}  # values that are already JSON
WHOLE, REAL = Bound("value", True, 0), Bound("value", False)  # the ranges of a number no `ranges` entry names


def to_json(obj: Any, arrays: dict[str, np.ndarray] | None = None, path: str = "") -> Any:
    """`obj` as plain JSON values; numpy array fields go to `arrays[path]` (TypeError when `arrays` is None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            sub = _join(path, f.name)
            if isinstance(value, np.ndarray):
                if arrays is None:
                    raise TypeError(f"{sub} is an array: pass `arrays` to receive it")
                arrays[sub] = value
                continue
            out[f.name] = to_json(value, arrays, sub)
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (list, tuple)):
        if all(type(v) in _PLAIN for v in obj):  # the common case, quickly: ids, token pieces
            return list(obj)
        return [to_json(v, arrays, _join(path, str(i))) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return {k: to_json(v, arrays, _join(path, str(k))) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{path or 'value'}: {type(obj).__name__} has no JSON form")


def from_json(tp: Any, data: Any, *, arrays: Mapping[str, np.ndarray] | None = None,
              ranges: Mapping[str, Bound] | None = None, path: str = "") -> Any:
    """A `tp` built from `data` (what `to_json` wrote); InputError naming the path at the first mismatch."""
    return _Reader(arrays or {}, ranges or {}).read(tp, data, path, "")


class _Reader:
    """One `from_json` call: the arrays and number ranges it reads with."""

    def __init__(self, arrays: Mapping[str, np.ndarray], ranges: Mapping[str, Bound]) -> None:
        self.arrays, self.ranges = arrays, ranges

    def read(self, tp: Any, data: Any, path: str, field: str) -> Any:
        """`data` as a `tp` at `path`; `field` is the dataclass field it sits under (it picks the range)."""
        if tp is int or tp is float:  # the plain types first: most values are these
            return self.number(tp is int, data, path, field)
        if tp is str:
            if not isinstance(data, str):
                raise InputError(f"{_name(path)} must be text, got {shown(data)}")
            return data
        if tp is bool:
            if not isinstance(data, bool):
                raise InputError(f"{_name(path)} must be true or false, got {shown(data)}")
            return data
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Any or tp is object:
            return self.any(data, path, field)
        if origin in (typing.Union, types.UnionType):
            if data is None and type(None) in args:
                return None
            arms = [a for a in args if a is not type(None)]
            for arm in arms[:-1]:  # the first arm that reads it; the last one's error otherwise
                try:
                    return self.read(arm, data, path, field)
                except InputError:
                    pass
            return self.read(arms[-1], data, path, field)
        if dataclasses.is_dataclass(tp):
            return self.dataclass(tp, data, path)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            try:
                return tp(data)
            except ValueError:
                allowed = ", ".join(repr(m.value) for m in tp)
                raise InputError(f"{_name(path)} must be one of {allowed}, got {shown(data)}") from None
        if tp in (list, tuple) or origin in (list, tuple):
            if not isinstance(data, list):
                raise InputError(f"{_name(path)} must be a list, got {shown(data)}")
            if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[X, Y, Z]: exactly that many
                if len(data) != len(args):
                    raise InputError(f"{_name(path)} must hold {len(args)} values, got {len(data)}")
                return tuple(self.read(a, v, _join(path, str(i)), field) for i, (a, v) in enumerate(zip(args, data)))
            item = args[0] if args else Any
            if item is str and all(type(v) is str for v in data):  # the common case, quickly: token pieces
                items = list(data)
            else:
                items = [self.read(item, v, _join(path, str(i)), field) for i, v in enumerate(data)]
            return tuple(items) if (origin or tp) is tuple else items
        if tp is dict or origin is dict:
            if not isinstance(data, dict):
                raise InputError(f"{_name(path)} must be an object, got {shown(data)}")
            key_t, value_t = args if args else (str, Any)
            return {self.key(key_t, k, path): self.read(value_t, v, _join(path, str(k)), field)
                    for k, v in data.items()}
        raise TypeError(f"{_name(path)}: cannot read a {tp!r} from JSON")

    def dataclass(self, cls: type, data: Any, path: str) -> Any:
        if not isinstance(data, dict):
            raise InputError(f"{_name(path)} must be an object, got {shown(data)}")
        hints, values = _hints(cls), {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            sub, tp = _join(path, f.name), hints[f.name]
            if tp is np.ndarray:
                if sub not in self.arrays:
                    raise InputError(f"missing the array {sub}")
                values[f.name] = self.arrays[sub]
            elif f.name in data:
                values[f.name] = self.read(tp, data[f.name], sub, f.name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"missing {f.name!r} at {path or 'the top level'}")
        return cls(**values)

    def number(self, whole: bool, data: Any, path: str, field: str) -> int | float:
        bound = self.ranges.get(field) or (WHOLE if whole else REAL)
        try:
            if isinstance(data, bool) or not isinstance(data, (int, float)):  # "5" in a file is not the number 5
                raise bound.refuse(data)
            return bound.parse(data)
        except InputError:
            raise dataclasses.replace(bound, name=_name(path)).refuse(data) from None

    def key(self, tp: Any, key: str, path: str) -> Any:
        if tp is int:  # JSON object keys are text: an int key was written as its digits
            try:
                return self.number(True, int(key), _join(path, key), "")
            except ValueError:
                raise InputError(f"{_name(path)} has the key {shown(key)}, not a whole number") from None
        return self.read(tp, key, path, "")

    def any(self, data: Any, path: str, field: str) -> Any:
        """An untyped value: plain JSON, with every number finite."""
        if isinstance(data, bool) or data is None or isinstance(data, str):
            return data
        if isinstance(data, (int, float)):
            return self.number(isinstance(data, int), data, path, field) if field in self.ranges else \
                Bound(_name(path), isinstance(data, int)).parse(data)
        if isinstance(data, list):
            return [self.any(v, _join(path, str(i)), field) for i, v in enumerate(data)]
        if isinstance(data, dict):
            return {str(k): self.any(v, _join(path, str(k)), field) for k, v in data.items()}
        raise InputError(f"{_name(path)} holds a {type(data).__name__}, not JSON")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _name(path: str) -> str:
    return path or "the value"
