"""`python -m bench.speculative --quick` runs end to end (on a tiny model) and prints its table: plain and both drafters,
each with the same output as plain greedy decoding."""

from __future__ import annotations

from tests.support.tiny import run_bench_quick


def test_speculative_bench_quick(tmp_path):
    stdout = run_bench_quick("speculative", tmp_path / "m")
    rows = [line.split("|")[1:-1] for line in stdout.splitlines() if line.startswith("| code")]
    assert [r[1].strip() for r in rows] == ["plain", "ngram", "early-exit:1"]
    assert all(r[7].strip() == "yes" for r in rows[1:])  # greedy: token for token the plain output
    assert all(float(r[6].strip().rstrip("x")) > 0 for r in rows)
