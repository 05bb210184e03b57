"""`inspector kv-eval`: the --json contract, KL exactly 0 when the budget covers the text, and one line
naming what is allowed for every kind of bad input."""

from __future__ import annotations

import json

import pytest
from tests.support.tiny import CORPUS, make_tiny_checkpoint, tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main

KEYS = {"policy", "budget", "tokens", "kl_mean", "kl_p95", "top1_agreement", "ppl", "ppl_full", "kv_bytes",
        "kv_bytes_full", "seconds"}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kv") / "text.txt"
    path.write_text(" ".join(CORPUS[:5]), encoding="utf-8")
    return path


def kv_eval(capsys, *args: str) -> dict:
    assert main(["kv-eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract_and_a_covering_budget(capsys, tiny_llama_dir, text_file):  # noqa: F811
    base = ["--model", str(tiny_llama_dir), "--text-file", str(text_file)]
    full = kv_eval(capsys, *base, "--policy", "full")
    assert KEYS <= set(full) and full["kl_mean"] == 0.0 and full["kv_bytes"] == full["kv_bytes_full"]
    n = full["tokens"]
    for policy in ("window", "sinks", "h2o", "snapkv"):
        out = kv_eval(capsys, *base, "--policy", policy, "--budget", str(n))
        assert out["kl_mean"] == 0.0 and out["top1_agreement"] == 1.0 and out["budget"] == n
    small = kv_eval(capsys, *base, "--policy", "h2o", "--budget", "8")
    assert small["kl_mean"] > 0 and small["kv_bytes"] < small["kv_bytes_full"]
    contiguous = kv_eval(capsys, *base, "--policy", "sinks", "--budget", "8", "--sinks", "2", "--positions", "contiguous")
    assert contiguous["positions"] == "contiguous" and contiguous["kv_bytes"] < contiguous["kv_bytes_full"]
    for policy in ("int8", "int4"):
        out = kv_eval(capsys, *base, "--policy", policy)
        assert out["budget"] is None and out["kv_bytes"] < out["kv_bytes_full"] and out["top1_agreement"] > 0.5


def one_line_error(capsys, args: list[str], code: int) -> str:
    try:
        rc = main(["kv-eval", *args])
    except SystemExit as e:
        rc = e.code
    assert rc == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("extra,code,message", [
    (["--policy", "h2o", "--budget", "0"], 2, "budget must be a whole number >= 1 (positions each layer keeps), got '0'"),
    (["--policy", "h2o", "--budget", "-4"], 2, "budget must be a whole number >= 1"),
    (["--policy", "sinks", "--budget", "8", "--sinks", "8"], 1, "sinks must be from 1 to budget - 1 (7), got 8"),
    (["--policy", "lru", "--budget", "8"], 1, "unknown policy 'lru': the policies are full, window, sinks, h2o, snapkv, int8, int4"),
    (["--policy", "h2o"], 1, "policy h2o needs a budget"),
    (["--policy", "h2o", "--budget", "8", "--positions", "contiguous"], 1, "re-rotated positions apply to the window family"),
])
def test_bad_settings(capsys, tiny_llama_dir, text_file, extra, code, message):  # noqa: F811
    err = one_line_error(capsys, ["--model", str(tiny_llama_dir), "--text-file", str(text_file), *extra], code)
    assert message in err


def test_bad_text_files(capsys, tmp_path, tiny_llama_dir):  # noqa: F811
    empty, latin1, long = tmp_path / "empty.txt", tmp_path / "latin1.txt", tmp_path / "long.txt"
    empty.write_text("  \n", encoding="utf-8")
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    long.write_text(" ".join(CORPUS) * 4, encoding="utf-8")
    base = ["--model", str(tiny_llama_dir), "--policy", "window", "--budget", "8", "--text-file"]
    assert "is empty" in one_line_error(capsys, base + [str(empty)], 1)
    assert "is not UTF-8 (byte 3)" in one_line_error(capsys, base + [str(latin1)], 1)
    assert "cannot read text file" in one_line_error(capsys, base + [str(tmp_path / "missing.txt")], 1)
    small = make_tiny_checkpoint(tmp_path / "ctx", max_position_embeddings=32)
    capsys.readouterr()  # the checkpoint writer's progress bar
    err = one_line_error(capsys, ["--model", str(small), "--policy", "window", "--budget", "8", "--text-file", str(long)], 1)
    assert "the model's context window is 32 tokens" in err
