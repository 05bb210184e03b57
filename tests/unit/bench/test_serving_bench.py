"""`python -m bench.batching --quick` runs end to end (on the tiny model) and prints its tables with the roofline
columns."""

from __future__ import annotations

from tests.support.tiny import run_bench_quick


def test_batching_bench_quick(tmp_path):
    stdout = run_bench_quick("batching", tmp_path / "m", tie=False)
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    assert "GB/s" in header and "% of peak GFLOP/s" in header and "FLOP/byte" in header
    rows = [line.split("|")[1:-1] for line in lines if line[:4] in ("| 1 ", "| 2 ", "| 4 ")]
    assert [int(r[0]) for r in rows] == [1, 2, 4]
    intensity = [float(r[6]) for r in rows]
    assert intensity == sorted(intensity) and intensity[2] > 3 * intensity[0]  # batching moves decode right
    assert "Peaks (measured once, cached)" in stdout and "contiguous / paged" in stdout
    assert (tmp_path / "roofline-peaks.json").exists()  # cached next to the model's directory
