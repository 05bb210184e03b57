"""`inspector.session.codec`: dataclasses to JSON and back by their field types, every number checked, and the
records of a real session written exactly as trace files have always stored them."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pytest

from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.session import restore
from inspector.session.codec import from_json, to_json
from inspector.session.records import ForwardRecord
from inspector.session.session import Session
from inspector.validate import Bound
from tests.support.viz_records import tiny_loaded  # noqa: F401


class Kind(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass
class Inner:
    id: int
    score: float
    tags: list[str] = field(default_factory=list)


@dataclass
class Outer:
    kind: Kind
    inner: Inner
    maybe: Inner | None
    shape: tuple[int, int]
    ids: tuple[int, ...]
    nested: list[list[int]]
    table: dict[str, float]
    by_id: dict[int, str]
    free: dict
    norms: np.ndarray
    flag: bool = False
    note: str | None = None


def sample_outer() -> Outer:
    return Outer(Kind.DECODE, Inner(3, -1.5, ["a"]), None, (2, 3), (1, 2, 3), [[1], [], [2, 3]], {"x": 0.25},
                 {7: "seven"}, {"forced": True, "ms": 1.5, "n": [1, 2]}, np.arange(6, dtype=np.float32).reshape(2, 3))


def test_round_trip_of_every_supported_type():
    obj, arrays = sample_outer(), {}
    doc = to_json(obj, arrays)
    assert set(arrays) == {"norms"} and "norms" not in doc  # arrays travel beside the JSON, by path
    assert json.loads(json.dumps(doc)) == {**doc, "by_id": {"7": "seven"}}  # plain JSON (int keys become text)
    assert doc["kind"] == "decode" and doc["shape"] == [2, 3] and doc["maybe"] is None
    back = from_json(Outer, json.loads(json.dumps(doc)), arrays=arrays)
    assert back == Outer(**{f.name: getattr(obj, f.name) for f in fields(Outer) if f.name != "norms"}, norms=back.norms)
    assert back.norms is arrays["norms"] and isinstance(back.shape, tuple) and back.by_id == {7: "seven"}


def test_nested_array_paths_and_defaults():
    @dataclass
    class Holder:
        items: list[Outer]

    arrays: dict[str, np.ndarray] = {}
    doc = to_json(Holder([sample_outer(), sample_outer()]), arrays)
    assert sorted(arrays) == ["items.0.norms", "items.1.norms"]
    del doc["items"][1]["flag"], doc["items"][1]["inner"]["tags"]  # fields with defaults may be absent
    back = from_json(Holder, doc, arrays=arrays)
    assert back.items[1].flag is False and back.items[1].inner.tags == []
    with pytest.raises(TypeError, match="items.0.norms is an array"):
        to_json(Holder([sample_outer()]))  # an array with nowhere to go is a programming error


GOOD = to_json(sample_outer(), {})


@pytest.mark.parametrize("where, value, message", [
    (("inner", "id"), -5, "inner.id must be a whole number >= 0, got -5"),
    (("inner", "id"), "abc", "inner.id must be a whole number >= 0, got 'abc'"),
    (("inner", "id"), "5", "inner.id must be a whole number >= 0, got '5'"),  # text is not a number in a file
    (("inner", "id"), 2.5, "inner.id must be a whole number >= 0, got 2.5"),
    (("inner", "id"), True, "inner.id must be a whole number >= 0, got True"),
    (("inner", "score"), float("nan"), "inner.score must be a number, got nan"),
    (("inner", "score"), float("inf"), "inner.score must be a number, got inf"),
    (("inner", "score"), None, "inner.score must be a number, got None"),
    (("ids", 1), -1, "ids.1 must be a whole number >= 0, got -1"),
    (("nested", 2, 0), "x", "nested.2.0 must be a whole number >= 0, got 'x'"),
    (("table", "x"), float("-inf"), "table.x must be a number, got -inf"),
    (("free", "ms"), float("nan"), "free.ms must be a number, got nan"),  # untyped values: numbers finite too
    (("kind",), "sideways", "kind must be one of 'prefill', 'decode', got 'sideways'"),
    (("flag",), 1, "flag must be true or false, got 1"),
    (("note",), 3, "note must be text, got 3"),
    (("inner",), [1], "inner must be an object, got [1]"),
    (("nested",), {"a": 1}, "nested must be a list"),
    (("shape",), [1, 2, 3], "shape must hold 2 values, got 3"),
    (("by_id",), {"seven": "x"}, "by_id has the key 'seven', not a whole number"),
])
def test_a_bad_value_is_one_line_naming_its_path(where, value, message):
    doc = json.loads(json.dumps(GOOD))
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(InputError) as err:
        from_json(Outer, doc, arrays={"norms": np.zeros(1)})
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_missing_fields_and_arrays_are_named():
    doc = json.loads(json.dumps(GOOD))
    del doc["inner"]["score"]
    with pytest.raises(InputError, match="missing 'score' at inner"):
        from_json(Outer, doc, arrays={"norms": np.zeros(1)})
    with pytest.raises(InputError, match="missing the array norms"):
        from_json(Outer, GOOD)


def test_ranges_by_field_name():
    ranges = {"score": Bound("score", False, 0, 1)}
    doc = json.loads(json.dumps(GOOD))
    with pytest.raises(InputError, match=r"inner.score must be a number in \[0, 1\], got -1.5"):
        from_json(Outer, doc, arrays={"norms": np.zeros(1)}, ranges=ranges)
    doc["inner"]["score"] = 0.5
    assert from_json(Outer, doc, arrays={"norms": np.zeros(1)}, ranges=ranges).inner.score == 0.5


# ---- the records of a real session: the format trace files have always had
def test_records_are_written_as_trace_files_store_them(tiny_loaded):  # noqa: F811
    params = SamplingParams(temperature=0.8, top_k=5, seed=1)
    s = Session(tiny_loaded, lens=True)
    s.prefill("The quick brown fox", params, max_new_tokens=8)
    for _ in range(3):
        s.step(params)
    for f in s.trace.forwards:
        s.trace.fill_lens(f)
    for rec in s.records:
        arrays: dict[str, Any] = {}
        doc = to_json(rec, arrays)
        assert set(arrays) == set(restore.ARRAY_FIELDS)
        back = from_json(ForwardRecord, json.loads(json.dumps(doc)), arrays=arrays)
        for f in fields(ForwardRecord):
            x, y = getattr(rec, f.name), getattr(back, f.name)
            assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name
