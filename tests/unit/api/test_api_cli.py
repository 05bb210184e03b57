"""The API's analyses and labs give what their CLI commands print with --json on the same input (timings apart):
attribute, patch, loss (with and without --grad-norms), kv-eval, quant, run --num-beams, run --speculative,
and a saved run's `inspector trace --json`. The runs' JSON carries their description ("request"), the CLI's
naming the model source it loaded where the API's names none."""

from __future__ import annotations

import json

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

import inspector
from inspector.commands.cli import main
from inspector.errors import InputError
from inspector.generation.request import RunRequest
from tests.support.json_compare import same, untimed


TEXT = "The quick brown fox jumps over the lazy dog. Attention is all you need; the cache grows by one position."


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


def cli_json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_attribute(model, tiny_llama_dir, capsys):  # noqa: F811
    cli = cli_json(capsys, "attribute", "--prompt", "Hello world", "--chat", "--token", "#7", "--model",
                   str(tiny_llama_dir), "--json")
    api = model.attribute("Hello world", chat=True, token=7)
    assert same(untimed(api.to_json()), untimed(cli))
    assert cli["token_id"] == 7 and inspector.figure(api).layout.title.text


def test_patch(model, tiny_llama_dir, capsys):  # noqa: F811
    cli = cli_json(capsys, "patch", "--clean", "The fox", "--corrupt", "The dog", "--answer", "#5", "--wrong", "#6",
                   "--point", "mlp_out", "--model", str(tiny_llama_dir), "--json")
    api = model.patch("The fox", "The dog", 5, "#6", point="mlp_out")
    assert same(untimed(api.to_json()), untimed(cli))
    assert len(inspector.figure(api).data) == 1


@pytest.mark.parametrize("grad_norms", [False, True])
def test_loss(model, tiny_llama_dir, capsys, tmp_path, grad_norms):  # noqa: F811
    (tmp_path / "t.txt").write_text(TEXT)
    argv = ["loss", "--text-file", str(tmp_path / "t.txt"), "--model", str(tiny_llama_dir), "--json"]
    cli = cli_json(capsys, *argv, *(["--grad-norms"] if grad_norms else []))
    api = model.loss(TEXT, grad_norms=grad_norms)
    assert same(untimed(api.to_json()), untimed(cli), 1e-4)
    assert ("grad_norms" in cli) == grad_norms


def test_kv_eval(model, tiny_llama_dir, capsys, tmp_path):  # noqa: F811
    (tmp_path / "t.txt").write_text(TEXT)
    cli = cli_json(capsys, "kv-eval", "--text-file", str(tmp_path / "t.txt"), "--policy", "sinks", "--budget", "8",
                   "--sinks", "2", "--positions", "contiguous", "--model", str(tiny_llama_dir), "--json")
    api = model.kv_eval(TEXT, policy="sinks", budget=8, sinks=2, positions="contiguous")
    assert same(untimed(api), untimed(cli))


def test_quant(model, tiny_llama_dir, capsys):  # noqa: F811
    cli = cli_json(capsys, "quant", "--prompt", "Hello world", "--quant", "int8", "--kv-quant", "int8",
                   "--max-new-tokens", "4", "--model", str(tiny_llama_dir), "--json")
    api = model.quant("Hello world", quant="int8", kv_quant="int8", max_new_tokens=4)
    assert same(untimed(api.summary()), untimed(cli))


def test_beam_search(model, tiny_llama_dir, capsys):  # noqa: F811
    from inspector.commands.decoding import beam_dict

    cli = cli_json(capsys, "run", "--prompt", "Hello world", "--num-beams", "3", "--length-penalty", "0.5",
                   "--max-new-tokens", "5", "--model", str(tiny_llama_dir), "--json")
    assert RunRequest.from_json(cli.pop("request")) == RunRequest.of(
        model=str(tiny_llama_dir), prompt="Hello world", num_beams=3, length_penalty=0.5, max_new_tokens=5)
    api = model.beam_search("Hello world", num_beams=3, length_penalty=0.5, max_new_tokens=5)
    assert api.request == RunRequest.of(prompt="Hello world", num_beams=3, length_penalty=0.5, max_new_tokens=5,
                                        device=model.loaded.device)  # the record carries the request it ran
    ran = beam_dict(model.loaded, api)
    assert RunRequest.from_json(ran.pop("request")) == api.request
    assert same(ran, cli)
    again = model.beam_search(request=api.request)  # the request itself, as `inspector run --num-beams` hands it over
    assert again.request is api.request and same(beam_dict(model.loaded, again), beam_dict(model.loaded, api))
    with pytest.raises(InputError, match="not both"):
        model.beam_search("Hello world", request=api.request)


@pytest.mark.parametrize("drafter", ["ngram", "early-exit:1"])
def test_speculative(model, tiny_llama_dir, capsys, drafter):  # noqa: F811
    cli = cli_json(capsys, "run", "--prompt", "the cat the cat the cat", "--speculative", drafter, "--draft-len", "3",
                   "--max-new-tokens", "10", "--model", str(tiny_llama_dir), "--json")
    run = model.prefill("the cat the cat the cat", speculative=drafter, draft_len=3, max_new_tokens=10)
    rounds = list(run.play())
    assert isinstance(run, inspector.SpeculativeRun) and rounds == run.rounds and run.finished == "max_tokens"
    api = run.to_json()
    assert cli.pop("request") == {**api.pop("request"), "model": str(tiny_llama_dir)}
    assert same(untimed(api), untimed(cli))
    assert run.figure("speculative").data and "<" in run.figure("rounds")


def test_saved_run_is_what_inspector_trace_prints(model, capsys, tmp_path):
    from inspector.commands.run import result_dict

    run = model.prefill("Hello world", chat=True, max_new_tokens=4)
    list(run.play())
    run.save(tmp_path / "r.safetensors")
    cli = cli_json(capsys, "trace", str(tmp_path / "r.safetensors"), "--json")
    assert same(untimed(result_dict(run.session)), untimed(cli))
    assert cli["generated_ids"] == inspector.open_trace(tmp_path / "r.safetensors").generated_ids
