"""`inspector trace FILE`: --json prints the object `inspector run --json` printed for the run, without a model;
the summary names the model and the outcome; bad files are one line with exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main
from inspector.commands.run import result_dict
from inspector.engine.config import SamplingParams
from inspector.models.loader import load_model
from inspector.session.session import Session
from inspector.session.trace_file import save_trace

PROMPT = "Hello world"


def recorded_run(model_dir, tmp_path):
    """A run built the way `inspector run --json` builds it, its printed JSON, and its trace file."""
    loaded = load_model(str(model_dir))
    params = SamplingParams(temperature=0.8, top_k=40, seed=3)
    session = Session(loaded, recompute=False, record=True)
    session.prefill(PROMPT, params, chat=True, max_new_tokens=5)
    for _ in session.play(params):
        pass
    printed = json.dumps(result_dict(session), ensure_ascii=False)
    path = tmp_path / "run.safetensors"
    save_trace(session, path, prompt=PROMPT, chat=True)
    return printed, path


def test_json_is_what_run_printed(capsys, tiny_llama_dir, tmp_path):  # noqa: F811
    printed, path = recorded_run(tiny_llama_dir, tmp_path)
    assert main(["trace", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert out == printed + "\n"
    # and the run's ids are those `inspector run --json` itself prints for the same settings
    assert main(["run", "--prompt", PROMPT, "--chat", "--model", str(tiny_llama_dir), "--max-new-tokens", "5",
                 "--temperature", "0.8", "--top-k", "40", "--seed", "3", "--json"]) == 0
    ran, traced = json.loads(capsys.readouterr().out), json.loads(out)
    for key in ("model", "prompt_ids", "prompt_pieces", "generated_ids", "text", "finished"):
        assert ran[key] == traced[key], key
    assert [s["top"] for s in ran["steps"]] == [s["top"] for s in traced["steps"]]


def test_summary(capsys, tiny_llama_dir, tmp_path):  # noqa: F811
    printed, path = recorded_run(tiny_llama_dir, tmp_path)
    run = json.loads(printed)
    assert main(["trace", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model: tiny-llama (float32, weights ")
    assert f"generated: {len(run['generated_ids'])} tokens" in out and f"finished: {run['finished']}" in out
    assert "temperature 0.8, top_k 40" in out and "; chat" in out and repr(run["text"]) in out
    assert f"prompt text: {PROMPT!r}" in out


@pytest.mark.parametrize("content, message", [
    (None, "no trace file at"),
    (b"not a trace", "not a readable trace file"),
])
def test_bad_files_are_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "x.safetensors"
    if content is not None:
        path.write_bytes(content)
    assert main(["trace", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err and captured.err.count("\n") == 1


def test_a_file_argument_is_required(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["trace"])
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_run_save_trace_then_trace_prints_the_same_json(capsys, tiny_llama_dir, tmp_path):  # noqa: F811
    path = tmp_path / "cli.safetensors"
    args = ["run", "--model", str(tiny_llama_dir), "--prompt", PROMPT, "--max-new-tokens", "4",
            "--temperature", "0.7", "--seed", "2", "--json"]
    assert main([*args, "--save-trace", str(path)]) == 0
    printed = capsys.readouterr().out
    assert main(["trace", str(path), "--json"]) == 0
    assert capsys.readouterr().out == printed
    assert main(["run", "--model", str(tiny_llama_dir), "--prompt", PROMPT, "--max-new-tokens", "2",
                 "--save-trace", str(tmp_path / "plain.safetensors")]) == 0  # streamed text, trace saved too
    streamed = capsys.readouterr().out
    assert main(["trace", str(tmp_path / "plain.safetensors"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == streamed.rstrip("\n")
    assert main([*args, "--speculative", "ngram", "--save-trace", str(path)]) == 1
    assert "drop --speculative" in capsys.readouterr().err


def test_a_file_of_the_first_version_and_a_corrupted_count(capsys, tmp_path):
    """The committed v1 trace prints without a model; the same file with a step count of "nan" (its checksum
    made to match) is one line naming the field, exit 1."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from inspector.session import trace_file

    fixture = Path(__file__).parents[2] / "data" / "trace_v1_tiny.safetensors"
    assert main(["trace", str(fixture)]) == 0
    assert "prompt text: 'The quick brown fox'" in capsys.readouterr().out
    doc, tensors = trace_file.read_trace(fixture)
    doc["forwards"][1]["step"] = "nan"
    text = json.dumps(doc)
    with safe_open(str(fixture), "pt") as f:
        meta = {**f.metadata(), "trace": text, "sha256": trace_file._digest(text, tensors)}
    save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=meta)
    assert main(["trace", str(tmp_path / "bad.safetensors"), "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err == ("error: bad.safetensors is corrupted: forwards.1.step must be a whole number >= 0, "
                            "got 'nan'\n")
