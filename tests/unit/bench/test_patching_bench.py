"""`python -m bench.patching --quick` runs end to end (on a tiny model) and prints its table: batched and
unbatched sweeps over the same cells agree."""

from __future__ import annotations

from tests.support.tiny import run_bench_quick


def test_patching_bench_quick(tmp_path):
    stdout = run_bench_quick("patching", tmp_path / "m")
    rows = {line.split("|")[1].strip(): line.split("|")[1:-1] for line in stdout.splitlines()
            if line.startswith("| batched") or line.startswith("| unbatched")}
    assert set(rows) == {"batched", "unbatched"}
    assert rows["batched"][1].strip() == rows["unbatched"][1].strip()  # --quick: the peer runs every cell
    assert float(rows["unbatched"][6]) < 1e-4
    assert "goal of 60 s" in stdout
