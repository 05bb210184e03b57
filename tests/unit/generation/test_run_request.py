"""`RunRequest`, a run described once: its one JSON form round-trips, its check gives one line per bad field in
the flags' or the keywords' names, and a JSON of another version or with unknown fields is refused."""

from __future__ import annotations

import json

import pytest

from inspector.errors import InputError
from inspector.generation.request import DEFAULTS, KEYWORDS, NAMES, VERSION, RunRequest


def full_request() -> RunRequest:
    return RunRequest(model="smollm2-135m", dtype="bf16", device="cpu", attention="tiled", prompt="Hello",
                      system="Be brief.", chat=True, max_new_tokens=9, temperature=0.7, top_k=5, top_p=0.9,
                      min_p=0.05, seed=3, repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=-0.5,
                      no_repeat_ngram_size=2, logit_bias=("5=3.0", "7=-1"), bad_words=("foo",), min_new_tokens=1,
                      stop=("END",), regex="[a-z]+", ablate_head=("1.0",), ablate_mlp=("0",),
                      scale_head=("1.1=0.5",), steer=1, steer_towards="love", steer_away="hate", steer_alpha=2.0,
                      on_context_full="window", policy="window", budget=16, sinks=2)


def test_json_round_trips_every_field():
    request = full_request()
    doc = json.loads(json.dumps(request.to_json()))  # through text, as a file or a link carries it
    assert doc["version"] == VERSION
    assert set(doc) == {"version", *NAMES}
    assert RunRequest.from_json(doc) == request
    ids = RunRequest(ids=(1, 2, 3), max_new_tokens=4)
    assert RunRequest.from_json(json.loads(json.dumps(ids.to_json()))) == ids


def test_json_of_another_version_or_with_unknown_fields_is_refused():
    doc = RunRequest(prompt="x").to_json()
    with pytest.raises(InputError, match=f"version 1 or {VERSION}, got 99"):
        RunRequest.from_json({**doc, "version": 99})
    with pytest.raises(InputError, match="unknown field.*temprature"):
        RunRequest.from_json({**doc, "temprature": 1.0})


def test_the_default_request_checks_and_matches_the_defaults():
    params, settings = RunRequest(prompt="Hello").check()
    assert (params.temperature, params.top_k, params.top_p, params.seed) == (0.0, 0, 1.0, 0)
    assert settings.is_default and settings.num_beams == 1
    assert {n: getattr(RunRequest(), n) for n in NAMES} == DEFAULTS
    assert set(KEYWORDS) <= set(NAMES) and "prompt" not in KEYWORDS


def test_check_gives_one_line_per_bad_field():  # in the fields' order
    bad = RunRequest(prompt="Hello", temperature=-1.0, top_p=0.0, on_context_full="wrap", num_beams=0)
    with pytest.raises(InputError) as exc:
        bad.check()
    lines = str(exc.value).splitlines()
    assert len(lines) == 4, lines
    with pytest.raises(InputError) as exc:
        bad.check(names="keywords")
    assert [line.split()[0] for line in str(exc.value).splitlines()] == ["temperature", "top_p", "num_beams",
                                                                         "on_context_full"]
    for line, start in zip(lines, ("--temperature", "--top-p", "--num-beams", "--on-context-full")):
        assert line.startswith(start), (line, start)


def test_check_names_the_fields_that_do_not_combine_one_line_each():
    request = RunRequest(prompt="Hello", speculative="ngram", no_cache=True, quant="int8", draft_len=None)
    with pytest.raises(InputError) as exc:
        request.check()
    lines = str(exc.value).splitlines()
    assert lines == ["--speculative verifies drafts against the KV cache: drop --no-cache",
                     "--speculative runs the loaded model's weights: drop --quant / --kv-quant"]
    with pytest.raises(InputError) as exc:
        request.check(names="keywords")
    assert str(exc.value).splitlines()[0] == "speculative verifies drafts against the KV cache: drop no_cache"


def test_keywords_build_a_checked_request_with_one_line_per_bad_keyword():
    request = RunRequest.from_keywords({"temperature": "0.5", "logit_bias": {5: 3.0}, "stop": "END"}, prompt="x")
    assert request.temperature == 0.5 and request.logit_bias == ("5=3.0",) and request.stop == ("END",)
    with pytest.raises(InputError) as exc:
        RunRequest.from_keywords({"top_k": -1, "chat": "yes", "quant": 8.5j})
    lines = str(exc.value).splitlines()
    assert [line.split()[0] for line in lines] == ["top_k", "chat", "quant"], lines
    with pytest.raises(InputError, match="unknown keyword 'temprature'"):
        RunRequest.from_keywords({"temprature": 1.0})


def test_a_request_from_json_is_checked_like_one_from_flags():
    doc = {**RunRequest(prompt="x").to_json(), "top_k": -3}
    with pytest.raises(InputError, match="--top-k must be a whole number >= 0"):
        RunRequest.from_json(doc).check()


def test_a_version_1_request_names_its_schema_file_and_reads_its_text(tmp_path):
    """Version 1 held --json-schema's path; a request of that version (a trace file saved then) reads the file."""
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "integer"}', encoding="utf-8")
    doc = {**RunRequest(prompt="x").to_json(), "version": 1, "json_schema": str(schema)}
    assert RunRequest.from_json(doc).json_schema == '{"type": "integer"}'
    with pytest.raises(InputError, match="cannot read the JSON schema file"):
        RunRequest.from_json({**doc, "json_schema": str(tmp_path / "gone.json")})
    text = RunRequest(prompt="x", json_schema='{"type": "integer"}').to_json()  # version 2: the text itself
    assert RunRequest.from_json(text).json_schema == '{"type": "integer"}'
