"""inspector.validate: every kind of bad value, open and closed bounds, big integers kept exact, and the
one-line message that names the field, the allowed values and what was given."""

from __future__ import annotations

import argparse
import math

import pytest

from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.validate import (MIN_TEMPERATURE, SAMPLING, SEED, TEMPERATURE, TOP_K, TOP_P, Bound, NumberError,
                                real, shown, whole)

LAYER = Bound("layer", True, 0, 29)
TOP_P_UI = Bound("top-p", False, 0.0, 1.0, lo_open=True)


@pytest.mark.parametrize("value, shown_as", [
    ("abc", "'abc'"), ("1,5", "'1,5'"), ("0x10", "'0x10'"), ("nan", "'nan'"), ("NaN", "'NaN'"), ("inf", "'inf'"),
    ("-Infinity", "'-Infinity'"), ("1e309", "'1e309'"), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
    (True, "True"), (False, "False"), ([1], "[1]"), ({"x": 1}, "{'x': 1}"), (object, "<class 'object'>"),
    (10**400, None), (2.5, "2.5"), ("2.5", "'2.5'"),
])
def test_refused_values_name_field_range_and_value(value, shown_as):
    with pytest.raises(InputError) as info:
        LAYER.parse(value)
    message = str(info.value)
    assert message.startswith("layer must be a whole number from 0 to 29, got ")
    assert "\n" not in message
    if shown_as is not None:
        assert message.endswith(f"got {shown_as}")


@pytest.mark.parametrize("value", [None, "", "   ", "\t\n"])
def test_empty_is_its_own_message(value):
    with pytest.raises(InputError, match=r"^layer is empty: enter a whole number from 0 to 29$"):
        LAYER.parse(value)


def test_out_of_range_is_refused_never_clamped():
    for value in (-1, 30, -5, 99999, "30", 29.0000001):
        with pytest.raises(InputError, match="from 0 to 29"):
            LAYER.parse(value)
    assert [LAYER.parse(v) for v in (0, 29, "7", " 7 ", 7.0, "7.0", "7e0")] == [0, 29, 7, 7, 7, 7, 7]
    assert all(type(LAYER.parse(v)) is int for v in (7.0, "7.0", "7e0"))


def test_open_and_closed_bounds():
    assert TOP_P_UI.parse(1) == 1.0 and TOP_P_UI.parse("1e-300") == 1e-300 and TOP_P_UI.parse(5e-324) == 5e-324
    for bad in (0, 0.0, -0.0, "0", 1.0000001, -1e-9):
        with pytest.raises(InputError, match=r"top-p must be a number in \(0, 1\], got"):
            TOP_P_UI.parse(bad)
    min_p = Bound("min-p", False, 0.0, 1.0, hi_open=True)
    assert min_p.parse(0) == 0.0 and min_p.parse(0.999999) == 0.999999
    with pytest.raises(InputError, match=r"min-p must be a number in \[0, 1\), got 1"):
        min_p.parse(1)
    assert real("3", "x", lo=3) == 3.0 and real(3, "x", hi=3) == 3.0
    with pytest.raises(InputError, match=r"x must be a number > 3, got 3"):
        real(3, "x", lo=3, lo_open=True)
    with pytest.raises(InputError, match=r"x must be a number < 3, got 3"):
        real(3, "x", hi=3, hi_open=True)


def test_huge_integers_stay_exact():
    big = 2**70 + 1
    assert whole(big, "seed", 0) == big and whole(str(big), "seed", 0) == big
    assert whole(10**400, "seed", 0) == 10**400  # JSON and Python allow any number of digits
    assert whole(f"  {2**63}  ", "seed", 0) == 2**63
    with pytest.raises(InputError, match="got 1e309|got '1e309'"):
        whole("1e309", "seed", 0)  # past the double range: refused, not infinity
    with pytest.raises(InputError, match=r"x must be a number, got 1000"):
        real(10**400, "x")  # a float field cannot hold it
    assert real(2**70, "x") == float(2**70)


def test_messages_cut_long_values():
    page = "9" * 5000 + "x"
    with pytest.raises(InputError) as info:
        LAYER.parse(page)
    assert len(str(info.value)) < 150 and "(5003 characters)" in str(info.value)
    assert shown("abc") == "'abc'"


def test_notes_and_least_nonzero():
    assert TOP_K.allowed == "a whole number >= 0 (0 = off)"
    assert TEMPERATURE.allowed == f"0 or a number >= {MIN_TEMPERATURE:g} (0 = greedy)"
    assert TEMPERATURE.parse(0) == 0.0 and TEMPERATURE.parse(MIN_TEMPERATURE) == MIN_TEMPERATURE
    for bad in (1e-7, 5e-324, -0.5):
        with pytest.raises(InputError, match=r"temperature must be 0 or a number >= 1e-06 \(0 = greedy\)"):
            TEMPERATURE.parse(bad)
    narrow = TEMPERATURE.within(hi=2.0)
    assert narrow.allowed == "0 or a number in [1e-06, 2] (0 = greedy)" and TEMPERATURE.hi is None
    with pytest.raises(InputError, match="got 2.5"):
        narrow.parse(2.5)


def test_number_error_is_an_input_error_and_a_value_error():
    with pytest.raises(NumberError) as info:
        SEED.parse(-1)
    assert isinstance(info.value, InputError) and isinstance(info.value, ValueError)


def test_argparse_type_is_the_same_check():
    p = argparse.ArgumentParser(prog="x", exit_on_error=False)
    p.add_argument("--layer", type=LAYER.argparse)
    assert p.parse_args(["--layer", "3"]).layer == 3
    with pytest.raises(argparse.ArgumentError, match="layer must be a whole number from 0 to 29, got '30'"):
        p.parse_args(["--layer", "30"])


def test_sampling_params_validate_uses_the_same_ranges():
    assert [b.name for b in SAMPLING] == ["temperature", "top-k", "top-p", "min-p", "seed"]
    SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, seed=2**70).validate()
    for kwargs, message in [({"temperature": -1}, "temperature must be 0 or a number >= 1e-06"),
                            ({"temperature": math.nan}, "got nan"), ({"top_k": -1}, "top-k must be a whole number >= 0"),
                            ({"top_p": 0.0}, r"top-p must be a number in \(0, 1\] \(1 = off\), got 0.0"),
                            ({"min_p": 1.0}, r"min-p must be a number in \[0, 1\)"), ({"seed": -2}, "seed must be")]:
        with pytest.raises(InputError, match=message):
            SamplingParams(**kwargs).validate()
        with pytest.raises(ValueError):  # what the engine's older callers catch
            SamplingParams(**kwargs).validate()
    assert TOP_P.lo_open and not TOP_P.hi_open
