"""bench/speculative.py --quick runs end to end (on a tiny model) and prints its table: plain and both drafters,
each with the same output as plain greedy decoding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_speculative_bench_quick(tmp_path):
    from tests.tiny import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "m")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "speculative.py"), "--quick", "--model", str(model)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| code")]
    assert [r[1].strip() for r in rows] == ["plain", "ngram", "early-exit:1"]
    assert all(r[7].strip() == "yes" for r in rows[1:])  # greedy: token for token the plain output
    assert all(float(r[6].strip().rstrip("x")) > 0 for r in rows)
