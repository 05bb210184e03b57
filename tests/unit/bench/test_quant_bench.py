"""`python -m bench.quant --quick` runs end to end on the tiny model and prints both tables, fp32 as the peer."""

from __future__ import annotations

from tests.support.tiny import run_bench_quick


def test_quant_bench_quick(tmp_path):
    stdout = run_bench_quick("quant", tmp_path / "m")
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in stdout.splitlines()
            if line.startswith("| ") and "MiB" in line}
    assert list(rows) == ["fp32", "bf16", "int8", "int4-g32", "int4-g64"]
    assert float(rows["fp32"][1]) == 1.0 and float(rows["fp32"][3]) == 1.0 and float(rows["fp32"][4]) == 0.0
    assert float(rows["int8"][1]) < 0.3 and float(rows["int4-g32"][1]) < float(rows["int8"][1])
    kernels = [line for line in stdout.splitlines() if line.startswith("| q_proj")]
    assert any("fp32 F.linear" in k for k in kernels) and any("int8 ours" in k for k in kernels)
    assert "WRONG RESULT" not in stdout
