"""`inspector run` with decoding flags on a tiny model: the JSON names every stage's effect, constraints hold,
beams report every hypothesis, bad input is one line naming what is allowed."""

from __future__ import annotations

import json
import re

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main


def run_json(capsys, model, *args: str) -> dict:
    assert main(["run", "--model", str(model), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_steps_name_each_stage_in_chain_order(capsys, tiny_llama_dir):  # noqa: F811
    out = run_json(capsys, tiny_llama_dir, "--prompt", "Hello world", "--max-new-tokens", "4", "--temperature", "0.8",
                   "--top-k", "5", "--seed", "7", "--repetition-penalty", "1.5", "--no-repeat-ngram-size", "2",
                   "--logit-bias", "5=-100")
    for step in out["steps"]:
        names = [st["name"] for st in step["stages"]]
        assert names == ["logit bias", "repetition penalty", "no-repeat n-gram", "temperature", "top-k", "top-p",
                         "min-p"]
        by = {st["name"]: st for st in step["stages"]}
        assert by["repetition penalty"]["moved"] >= len(set(out["prompt_ids"])) - 1 and by["repetition penalty"]["removed"] == 0
        assert by["top-k"]["allowed"] == 5 and by["top-k"]["mass_removed"] > 0
        assert by["logit bias"]["moved"] == 1 and by["temperature"]["removed"] == 0
        assert step["seed"] == 7 and set(by["top-k"]["top_after"][0]) == {"id", "piece", "prob"}
        assert step["chosen_id"] != 5
    again = run_json(capsys, tiny_llama_dir, "--prompt", "Hello world", "--max-new-tokens", "4", "--temperature",
                     "0.8", "--top-k", "5", "--seed", "7", "--repetition-penalty", "1.5", "--no-repeat-ngram-size", "2",
                     "--logit-bias", "5=-100")
    assert again["generated_ids"] == out["generated_ids"]


@pytest.mark.parametrize("flags, check", [
    (["--regex", "[0-9]{3}-[0-9]{2}"], lambda t: re.fullmatch("[0-9]{3}-[0-9]{2}", t)),
    (["--choice", "alpha", "--choice", "beta gamma"], lambda t: t in ("alpha", "beta gamma")),
    (["--regex", "(ab|cd)+x", "--min-new-tokens", "3"], lambda t: re.fullmatch("(ab|cd)+x", t)),
])
def test_constraints_hold_on_a_random_model(capsys, tiny_llama_dir, flags, check):  # noqa: F811
    for seed in ("0", "1", "2"):
        out = run_json(capsys, tiny_llama_dir, "--prompt", "Hi", "--max-new-tokens", "30", "--temperature", "1",
                       "--seed", seed, *flags)
        assert out["finished"] == "eos" and check(out["text"]), out["text"]
        grammar = [st for st in out["steps"][0]["stages"] if st["name"] == "grammar"][0]
        assert 0 < grammar["allowed"] < 100 and grammar["removed"] > 0


def test_stop_string_cuts_the_text(capsys, tiny_llama_dir):  # noqa: F811
    free = run_json(capsys, tiny_llama_dir, "--prompt", "Hi", "--max-new-tokens", "12", "--regex", "xy(zw)+")
    out = run_json(capsys, tiny_llama_dir, "--prompt", "Hi", "--max-new-tokens", "12", "--regex", "xy(zw)+",
                   "--stop", "zw")
    assert free["text"].startswith("xyzw") and out["text"] == "xy" and out["finished"] == "stop_string"


def test_beams_report_every_hypothesis(capsys, tiny_llama_dir):  # noqa: F811
    out = run_json(capsys, tiny_llama_dir, "--prompt", "Hello", "--max-new-tokens", "6", "--num-beams", "3",
                   "--length-penalty", "0.5")
    beams = out["beams"]
    assert beams["num_beams"] == 3 and len(beams["hypotheses"]) == 3
    scores = [h["score"] for h in beams["hypotheses"]]
    assert scores == sorted(scores, reverse=True)
    assert out["generated_ids"] == beams["hypotheses"][0]["generated_ids"]
    assert all(len(step) == 6 for step in beams["steps"])
    assert {n["status"] for step in beams["steps"] for n in step} >= {"running", "finished"}


@pytest.mark.parametrize("args, message", [
    (["--repetition-penalty", "0"], "repetition-penalty must be a number > 0"),
    (["--repetition-penalty", "-1"], "repetition-penalty must be a number > 0"),
    (["--num-beams", "17"], "num-beams must be a whole number from 1 to 16"),
    (["--presence-penalty", "3"], "presence-penalty must be a number in [-2, 2]"),
    (["--no-repeat-ngram-size", "x"], "no-repeat-ngram-size must be a whole number >= 0"),
])
def test_a_decoding_flag_out_of_range_is_a_usage_error(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--prompt", "hi", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--regex", "a(b"], "the regex does not compile"),
    (["--regex", ""], "--regex is empty"),
    (["--choice", ""], "the --choice list is empty"),
    (["--json-schema", "SCHEMA:{not json"], "the JSON schema is not valid JSON"),
    (["--json-schema", "SCHEMA:{\"type\": \"nonsense\"}"], "the JSON schema is not a JSON Schema"),
    (["--json-schema", "SCHEMA:[1, 2]"], "must be a JSON object"),
    (["--json-schema", "/nonexistent/schema.json"], "cannot read the JSON schema file"),
    (["--logit-bias", "12"], "logit bias must be ID=VALUE"),
    (["--logit-bias", "12=500"], "logit bias must be a number in [-100, 100]"),
    (["--num-beams", "4", "--regex", "a+"], "beam search runs without a grammar constraint"),
    (["--num-beams", "4", "--temperature", "0.7"], "--num-beams runs greedy beam search"),
    (["--length-penalty", "2"], "--length-penalty scores beam hypotheses"),
    (["--regex", "a", "--choice", "b"], "give one constraint"),
    (["--stop", ""], "a stop string is empty"),
    (["--bad-words", " "], "a bad word is empty"),
])
def test_bad_decoding_input_is_one_line(capsys, tmp_path, args, message):
    args = list(args)
    for i, a in enumerate(args):
        if a.startswith("SCHEMA:"):
            path = tmp_path / "schema.json"
            path.write_text(a[len("SCHEMA:"):])
            args[i] = str(path)
    assert main(["run", "--prompt", "hi", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_an_unsatisfiable_grammar_ends_with_a_finish_reason(capsys, tiny_llama_dir):  # noqa: F811
    """A schema no string satisfies is refused up front; a grammar whose only tokens another stage bans ends."""
    import pathlib
    import tempfile

    path = pathlib.Path(tempfile.mkdtemp()) / "s.json"
    path.write_text('{"type": "string", "minLength": 5, "maxLength": 2}')
    assert main(["run", "--prompt", "Hi", "--json-schema", str(path)]) == 1
    assert "Unsatisfiable" in capsys.readouterr().err
    out = run_json(capsys, tiny_llama_dir, "--prompt", "Hi", "--max-new-tokens", "20", "--temperature", "1",
                   "--regex", "x+", "--bad-words", "x", "--bad-words", "xx")
    assert out["finished"] == "eos" and len(out["generated_ids"]) == 1


def test_a_trace_file_keeps_the_decoding_settings(tmp_path, tiny_llama_dir):  # noqa: F811
    """Saved mid-run with a penalty, a ban and a constraint, reopened: it steps on to the same tokens."""
    from inspector.engine.config import SamplingParams
    from inspector.generation.settings import DecodingSettings
    from inspector.models.loader import load_model
    from inspector.session.session import Session
    from inspector.session.trace_file import load_trace, save_trace

    loaded = load_model(str(tiny_llama_dir))
    settings = DecodingSettings(repetition_penalty=1.4, bad_words=("the",), regex="[a-z ]{4,40}", stop=("zz",))
    params = SamplingParams(temperature=0.9, seed=5)

    def run(n: int) -> Session:
        s = Session(loaded)
        s.set_decoding(settings)
        s.prefill("Hello", params, max_new_tokens=12)
        for _ in range(n):
            if not s.finished:
                s.step(params)
        return s

    full, half = run(8), run(3)
    save_trace(half, tmp_path / "t.safetensors", prompt="Hello")
    restored = load_trace(tmp_path / "t.safetensors", loaded)
    assert restored.decoding == settings
    for _ in range(5):
        if not restored.finished:
            restored.step(params)
    assert restored.generated_ids == full.generated_ids
    assert [st.name for st in restored.records[-1].sample.stage_stats][:3] == ["repetition penalty", "bad words",
                                                                               "grammar"]
