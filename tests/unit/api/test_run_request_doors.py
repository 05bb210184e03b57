"""Three doors, one description: the Python API's keywords, `inspector run`'s flags and the page's Prefill build
equal `RunRequest`s for the same run, the run made from it keeps it (`run.request`, `session.request`, the
trace file), and the CLI's run through the API gives the API's tokens."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

import inspector
from inspector.commands.cli import build_parser, main
from inspector.commands.run import request_from
from inspector.generation.request import RunRequest

FLAGS = ["--chat", "--system", "Be brief.", "--max-new-tokens", "5", "--temperature", "0.7", "--top-k", "5",
         "--top-p", "0.9", "--seed", "3", "--repetition-penalty", "1.2", "--logit-bias", "5=3.0", "--stop", "END",
         "--ablate-head", "1.0", "--scale-head", "0.1=0.5", "--steer", "1", "--steer-towards", "love",
         "--steer-away", "hate"]
KEYWORDS = dict(chat=True, system="Be brief.", max_new_tokens=5, temperature=0.7, top_k=5, top_p=0.9, seed=3,
                repetition_penalty=1.2, logit_bias={5: 3.0}, stop="END", ablate_head=(1, 0), scale_head=(0, 1, 0.5),
                steer=1, steer_towards="love", steer_away="hate")


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


def test_keywords_and_flags_build_equal_requests(model, tiny_llama_dir):  # noqa: F811
    args = build_parser().parse_args(["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), *FLAGS])
    from_flags = request_from(args)
    run = model.prefill("Hello world", **KEYWORDS)
    assert isinstance(run.request, RunRequest)
    assert run.request == replace(from_flags, model=None)  # the API's model is the loaded one, not a source
    assert RunRequest.from_json(json.loads(json.dumps(run.request.to_json()))) == run.request
    assert from_flags.check()[0] == run.params  # one check, the same sampling parameters


def test_the_cli_run_gives_the_api_runs_tokens(model, tiny_llama_dir, capsys):  # noqa: F811
    run = model.prefill("Hello world", **KEYWORDS)
    list(run.play())
    assert main(["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), *FLAGS, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["generated_ids"] == run.generated_ids
    assert cli["interventions"] == [iv.label or iv.point for iv in run.session.levers.interventions]


def test_both_doors_refuse_in_their_own_names(model, tiny_llama_dir, capsys):  # noqa: F811
    with pytest.raises(inspector.InputError, match="^speculative verifies drafts against the KV cache: drop no_cache$"):
        model.prefill("Hello", speculative="ngram", no_cache=True)
    assert main(["run", "--prompt", "Hello", "--model", str(tiny_llama_dir), "--speculative", "ngram",
                 "--no-cache"]) == 1
    assert "--speculative verifies drafts against the KV cache: drop --no-cache" in capsys.readouterr().err


def test_the_json_and_the_trace_file_carry_the_request(model, tiny_llama_dir, tmp_path, capsys):  # noqa: F811
    args = ["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), *FLAGS]
    path = tmp_path / "run.safetensors"
    assert main([*args, "--json", "--save-trace", str(path)]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["request"] == request_from(build_parser().parse_args(args)).to_json()
    assert main(["trace", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["request"] == ran["request"]
    reopened = inspector.open_trace(path, model)
    assert reopened.request == RunRequest.from_json(ran["request"])
    api_run = model.prefill("Hello world", **KEYWORDS)
    api_run.save(tmp_path / "api.safetensors")
    assert inspector.open_trace(tmp_path / "api.safetensors").request == api_run.request


def test_the_page_the_cli_and_the_api_give_one_request(model, monkeypatch):
    """The same settings through the page's Prefill (its boxes' text and the settings panel), the CLI's flags
    and the API's keywords: one `RunRequest` JSON, kept with each run, and the same first token."""
    from inspector.session.trace_file import load_trace
    from inspector.ui import trace_io
    from inspector.ui.decoding_controls import apply
    from tests.support.handlers import make

    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "0")  # no forward left running on the shared model
    h, store = make(model.loaded)
    sid = store.new_id()
    panel = ["1.2", "0", "0", "0", "5=3", "", "0", "END", "none", "", "4", "1"]  # the panel's boxes, in its order
    assert "ii-error" not in apply(store, sid, *panel)
    sid, views = h.prefill(sid, "Hello world", True, "Be brief.", "0.7", "5", "0.9", "0", "3", "5", 0, 0)
    assert "ii-error" not in views["status"]
    page = store.get(sid).session
    keywords = dict(chat=True, system="Be brief.", max_new_tokens=5, temperature=0.7, top_k=5, top_p=0.9, seed=3,
                    repetition_penalty=1.2, logit_bias={5: 3.0}, stop="END")
    api = model.prefill("Hello world", **keywords)
    flags = ["run", "--prompt", "Hello world", "--chat", "--system", "Be brief.", "--max-new-tokens", "5",
             "--temperature", "0.7", "--top-k", "5", "--top-p", "0.9", "--seed", "3", "--repetition-penalty", "1.2",
             "--logit-bias", "5=3.0", "--stop", "END"]
    cli = replace(request_from(build_parser().parse_args(flags)), model=None).checked().request
    assert page.request == api.request.to_json() == cli.to_json()
    assert page.request["repetition_penalty"] == 1.2 and page.request["temperature"] == 0.7  # parsed, not text
    assert page.generated_ids == api.generated_ids and page.decoding == api.session.decoding
    path, _ = trace_io.export_trace(h, sid, "Hello world", True, "Be brief.")  # the page's trace file keeps it too
    assert load_trace(path, model.loaded).settings["request"] == page.request


def test_the_request_holds_the_schema_text(model, tmp_path):  # noqa: F811
    """--json-schema FILE is read when the flags' request is built; the API's keyword and the page take the text."""
    schema = '{"type": "string", "maxLength": 3}'
    path = tmp_path / "s.json"
    path.write_text(schema)
    cli = request_from(build_parser().parse_args(["run", "--prompt", "Hi", "--json-schema", str(path)]))
    assert cli.json_schema == schema and cli.check()[1].json_schema == schema
    run = model.prefill("Hi", json_schema=schema, max_new_tokens=2)
    as_dict = model.prefill("Hi", json_schema={"type": "string", "maxLength": 3}, max_new_tokens=2)
    assert run.request.json_schema == schema == as_dict.request.json_schema
    with pytest.raises(inspector.InputError, match="^json_schema is empty: give a JSON Schema object$"):
        model.prefill("Hi", json_schema=" ")


@pytest.mark.parametrize("extra", [["--speculative", "ngram", "--draft-len", "2"],
                                   ["--num-beams", "2", "--length-penalty", "0.5", "--repetition-penalty", "1.2"]],
                         ids=["speculative", "num-beams"])
def test_speculative_and_beam_json_carry_the_request(model, tiny_llama_dir, capsys, extra):  # noqa: F811
    args = ["run", "--prompt", "the cat the cat", "--model", str(tiny_llama_dir), "--max-new-tokens", "4", *extra]
    assert main([*args, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    from_flags = request_from(build_parser().parse_args(args))
    assert ran["request"] == from_flags.to_json() and RunRequest.from_json(ran["request"]) == from_flags
    assert ran["request"]["speculative" if "--speculative" in extra else "num_beams"] not in (None, 1)


def test_a_speculative_runs_json_carries_its_request(model):
    run = model.prefill("the cat the cat", speculative="ngram", draft_len=2, max_new_tokens=4)
    list(run.play())
    assert run.request == RunRequest.of(prompt="the cat the cat", speculative="ngram", draft_len=2, max_new_tokens=4)
    assert run.to_json()["request"] == run.request.to_json()


def test_the_analyses_refuse_in_each_doors_names(model, tiny_llama_dir, capsys):  # noqa: F811
    """One refusal, two spellings: the Model methods name their keywords, the CLI (which calls them with
    names="flags") its flags."""
    n = len(model.tokenize("a b c"))
    cases = [
        (lambda **kw: model.attribute("Hello", token="hello world", **kw),
         ["attribute", "--prompt", "Hello", "--token", "hello world"], "{}token 'hello world' is "),
        (lambda **kw: model.patch("a b", "a b c", "#1", "#2", **kw),
         ["patch", "--clean", "a b", "--corrupt", "a b c", "--answer", "#1", "--wrong", "#2"],
         f"{{}}clean is {len(model.tokenize('a b'))} tokens and {{}}corrupt {n}: patching needs prompts of the "
         "same token length"),
        (lambda **kw: model.quant("Hello", quant="int8", max_new_tokens=300, **kw),
         ["quant", "--prompt", "Hello", "--quant", "int8", "--max-new-tokens", "300"],
         "prompt plus {}max_new_tokens exceed the context window (256 tokens)"),
    ]
    for call, argv, says in cases:
        keywords = says.replace("{}", "")
        flags = says.replace("{}", "--").replace("--max_new_tokens", "--max-new-tokens")
        with pytest.raises(inspector.InputError) as kw_error:
            call()
        assert str(kw_error.value).startswith(keywords), kw_error.value
        with pytest.raises(inspector.InputError) as flag_error:
            call(names="flags")
        assert str(flag_error.value).startswith(flags), flag_error.value
        assert main([*argv, "--model", str(tiny_llama_dir)]) == 1
        assert capsys.readouterr().err == f"error: {flag_error.value}\n"
    with pytest.raises(inspector.InputError, match="^names must be one of keywords, flags, got 'argv'$"):
        model.attribute("Hello", names="argv")
