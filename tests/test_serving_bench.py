"""bench/batching.py --quick runs end to end (on the tiny model) and prints its tables with the roofline columns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_batching_bench_quick(tmp_path):
    from tests.tiny import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "m", tie=False)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "batching.py"), "--quick", "--model", str(model)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| batch |"))
    assert "GB/s" in header and "% of peak GFLOP/s" in header and "FLOP/byte" in header
    rows = [line.split("|")[1:-1] for line in lines if line[:4] in ("| 1 ", "| 2 ", "| 4 ")]
    assert [int(r[0]) for r in rows] == [1, 2, 4]
    intensity = [float(r[6]) for r in rows]
    assert intensity == sorted(intensity) and intensity[2] > 3 * intensity[0]  # batching moves decode right
    assert "Peaks (measured once, cached)" in out.stdout and "contiguous / paged" in out.stdout
    assert (tmp_path / "roofline-peaks.json").exists()  # cached next to the model's directory
