"""`inspector run`: streamed text, the --json contract keys, and one-line errors with exit 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

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
])
def test_bad_input_exits_with_one_line(capsys, args, message):
    assert main(["run", *args]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {err[7:]}" and message in err and err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--max-new-tokens", "0"], "max-new-tokens must be a whole number >= 1, got '0'"),
    (["--top-p", "0"], "top-p must be a number in (0, 1] (1 = off), got '0'"),
    (["--top-p", "1.5"], "top-p must be a number in (0, 1] (1 = off), got '1.5'"),
    (["--temperature", "-1"], "temperature must be 0 or a number >= 1e-06 (0 = greedy), got '-1'"),
    (["--temperature", "1e-9"], "temperature must be 0 or a number >= 1e-06 (0 = greedy), got '1e-9'"),
])
def test_a_flag_out_of_range_is_a_usage_error(capsys, args, message):
    """Checked as the flag is parsed, before any model loads: exit 2, one line naming field, range and value."""
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--prompt", "x", *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: inspector run: argument ") and err.count("\n") == 1
    assert message in err, err


def test_prompt_longer_than_context(tiny_llama_dir):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "inspector.commands.cli", "run", "--prompt", "the fox " * 200,
                           "--model", str(tiny_llama_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: prompt is ") and "context window is 256 tokens" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_speculative_json(capsys, tiny_llama_dir):  # noqa: F811
    common = ["--prompt", "The quick brown fox jumps over the lazy dog. The quick brown fox", "--model",
              str(tiny_llama_dir), "--max-new-tokens", "10"]
    plain = run_json(capsys, *common)
    for drafter in ("ngram", "early-exit:1"):
        out = run_json(capsys, *common, "--speculative", drafter, "--draft-len", "3")
        assert out["generated_ids"] == plain["generated_ids"] and out["text"] == plain["text"]  # greedy: the same
        assert {"model", "prompt_ids", "prompt_pieces", "finished", "steps", "timings"} <= set(out)
        spec = out["speculative"]
        assert {"drafter", "draft_len", "rounds", "drafted", "accepted", "target_forwards",
                "tokens_per_forward"} <= set(spec)
        assert spec["drafter"] == drafter and spec["draft_len"] == 3
        assert spec["rounds"] == spec["target_forwards"] == len(spec["per_round"]) >= 1
        assert spec["accepted"] == sum(r["accepted"] for r in spec["per_round"]) <= spec["drafted"]
        assert all(len(r["drafted"]) <= 3 for r in spec["per_round"])
        made = sum(r["accepted"] + (r["correction"] is not None) for r in spec["per_round"])
        assert made == len(out["generated_ids"]) - 1
        assert spec["tokens_per_forward"] == pytest.approx(made / spec["rounds"])
        assert [s["chosen_id"] for s in out["steps"]] == out["generated_ids"] and len(out["steps"][0]["top"]) == 20
        assert len(out["timings"]["tpot_ms"]) == len(out["generated_ids"]) - 1


def test_speculative_streams_text(capsys, tiny_llama_dir):  # noqa: F811
    args = ["run", "--prompt", "hello hello hello", "--model", str(tiny_llama_dir), "--max-new-tokens", "6",
            "--speculative", "ngram"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out == run_json(capsys, *args[1:])["text"] + "\n"
    assert "tokens per full-model forward" in captured.err


@pytest.mark.parametrize("args, message", [
    (["--speculative", "ngram", "--draft-len", "400"], "draft length 400 is past the context"),
    (["--speculative", "lookahead"], "unknown drafter 'lookahead'"),
    (["--speculative", "early-exit:9"], "early-exit layer must be a whole number from 1 to 1 (the model has 2 layers)"),
    (["--draft-len", "3"], "--draft-len needs --speculative"),
    (["--speculative", "ngram", "--no-cache"], "drop --no-cache"),
])
def test_speculative_bad_input_is_one_line(capsys, tiny_llama_dir, args, message):  # noqa: F811
    assert main(["run", "--prompt", "hello", "--model", str(tiny_llama_dir), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_quantized_run(capsys, tiny_llama_dir):  # noqa: F811
    base = ["--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "4"]
    plain = run_json(capsys, *base)
    int8 = run_json(capsys, *base, "--quant", "int8", "--kv-quant", "int8")
    assert len(int8["generated_ids"]) == len(plain["generated_ids"]) == 4
    assert len(int8["steps"]) == 4 and int8["model"] != ""
    for args, message in [(["--quant", "int3"], "int3"), (["--kv-quant", "int4"], "int4"),
                          (["--quant", "int8", "--speculative", "ngram"], "drop --quant"),
                          (["--quant", "int8", "--save-trace", "x.safetensors"], "drop --speculative / --quant")]:
        assert main(["run", *base, *args]) == 1
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
