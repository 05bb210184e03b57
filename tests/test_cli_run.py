"""`inspector run`: streamed text, the --json contract keys, and one-line errors with exit 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main


def run_json(capsys, *args: str) -> dict:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract(capsys, tiny_llama_dir):  # noqa: F811
    out = run_json(capsys, "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "5",
                   "--temperature", "0.8", "--top-k", "40", "--seed", "3")
    assert {"model", "prompt_ids", "prompt_pieces", "generated_ids", "text", "steps", "timings"} <= set(out)
    assert out["model"] == "tiny-llama"
    assert len(out["prompt_ids"]) == len(out["prompt_pieces"]) > 0
    n = len(out["generated_ids"])
    assert 1 <= n <= 5 and len(out["steps"]) == n
    assert [s["chosen_id"] for s in out["steps"]] == out["generated_ids"]
    for s in out["steps"]:
        assert len(s["top"]) == 20 and set(s["top"][0]) == {"id", "piece", "logit", "prob"}
        logits = [t["logit"] for t in s["top"]]
        assert logits == sorted(logits, reverse=True)
        assert len(s["resid_norms"]) == 2 and len(s["kv_bytes"]) == 2 and s["kv_bytes"][0] > 0
    assert out["timings"]["ttft_ms"] > 0 and len(out["timings"]["tpot_ms"]) == n - 1
    # the same seed gives the same ids, with or without the cache
    again = run_json(capsys, "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "5",
                     "--temperature", "0.8", "--top-k", "40", "--seed", "3", "--no-cache")
    assert again["generated_ids"] == out["generated_ids"]


def test_streams_text(capsys, tiny_llama_dir):  # noqa: F811
    out = run_json(capsys, "--prompt", "hi", "--chat", "--model", str(tiny_llama_dir), "--max-new-tokens", "8")
    assert main(["run", "--prompt", "hi", "--chat", "--model", str(tiny_llama_dir), "--max-new-tokens", "8"]) == 0
    captured = capsys.readouterr()
    assert captured.out == out["text"] + "\n"
    assert "finished" in captured.err
    assert out["prompt_pieces"][0] == "<|im_start|>"


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
    (["--prompt", "x", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "x", "--top-p", "1.5"], "top-p must be in (0, 1]"),
    (["--prompt", "x", "--temperature", "-1"], "temperature must be >= 0"),
])
def test_bad_input_exits_with_one_line(capsys, args, message):
    assert main(["run", *args]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {err[7:]}" and message in err and err.count("\n") == 1


def test_prompt_longer_than_context(tiny_llama_dir):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "inspector.commands.cli", "run", "--prompt", "the fox " * 200,
                           "--model", str(tiny_llama_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: prompt is ") and "context window is 256 tokens" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
