"""inspector.units.format_bytes: binary units with IEC labels, one decimal, whole bytes below 1 KiB."""

from __future__ import annotations

import pytest

from inspector.units import GIB, KIB, MIB, TIB, format_bytes


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (1, "1 B"),
    (512, "512 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (46_080, "45.0 KiB"),  # SmolLM2-135M's fp32 KV cache per token: 2 x 30 layers x 3 heads x 64 x 4 B
    (538_090_408, "513.2 MiB"),  # its fp32 weights: 538.1 MB in the decimal units file sizes are quoted in
    (98_362_432, "93.8 MiB"),
    (80 * GIB, "80.0 GiB"),
    (3 * TIB, "3.0 TiB"),
    (5000 * TIB, "5,000.0 TiB"),  # TiB is the largest unit
    (-3 * MIB, "-3.0 MiB"),  # a difference keeps its sign
    (1023.6, "1.0 KiB"),  # a float that rounds to 1024 B
    (2.4, "2 B"),
])
def test_format_bytes(n: float, text: str):
    assert format_bytes(n) == text


def test_never_prints_1024_of_a_unit():
    """Just under a unit's boundary rounds up to the next unit, not to 1,024.0 of this one."""
    for scale, unit, next_unit in ((KIB, "KiB", "MiB"), (MIB, "MiB", "GiB"), (GIB, "GiB", "TiB")):
        assert format_bytes(1024 * scale - 1) == f"1.0 {next_unit}"
        assert format_bytes(1023.9 * scale) == f"1,023.9 {unit}"


def test_labels_are_binary_only():
    texts = [format_bytes(2**k + 7) for k in range(0, 45)]
    assert all(t.split()[-1] in ("B", "KiB", "MiB", "GiB", "TiB") for t in texts)
