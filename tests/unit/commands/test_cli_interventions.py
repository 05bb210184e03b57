"""`inspector run` with interventions, `inspector patch` and `inspector attribute`: their JSON, the same
results as the library on the same model, and bad input as one line."""

from __future__ import annotations

import json

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main


def cli_json(capsys, *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_with_interventions_says_which_applied_and_equals_the_library(capsys, tiny_llama_dir):  # noqa: F811
    from inspector.engine.config import SamplingParams
    from inspector.generation import interventions as ivs
    from inspector.generation.levers import Levers
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    args = ["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "12",
            "--ablate-head", "1.2", "--ablate-mlp", "0", "--scale-head", "0.3=-1.5"]
    out = cli_json(capsys, *args)
    assert out["interventions"] == ["head 1.2 off", "MLP 0 off", "head 0.3 ×-1.5"]
    assert {"prompt_ids", "generated_ids", "steps"} <= set(out) and len(out["steps"]) == len(out["generated_ids"])
    assert cli_json(capsys, *args, "--no-cache")["generated_ids"] == out["generated_ids"]
    plain = cli_json(capsys, "run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "12")
    assert plain["interventions"] == [] and plain["steps"][0]["top"] != out["steps"][0]["top"]
    loaded = load_model(str(tiny_llama_dir))
    cfg = loaded.config
    levers = Levers(interventions=ivs.head(cfg, 1, 2) + ivs.component(cfg, "mlp_out", 0)
                    + ivs.head(cfg, 0, 3, "scale", factor=-1.5))
    s = Session(loaded, levers=levers, record=False)
    s.prefill_ids(out["prompt_ids"], SamplingParams(), max_new_tokens=12)
    for _ in s.play(SamplingParams()):
        pass
    assert s.generated_ids == out["generated_ids"]


def test_run_with_steering(capsys, tiny_llama_dir):  # noqa: F811
    out = cli_json(capsys, "run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "6",
                   "--steer", "1", "--steer-towards", "good day", "--steer-away", "bad night", "--steer-alpha", "3")
    assert out["interventions"] == ["steer 1 α=3"]


def test_patch_json(capsys, tiny_llama_dir):  # noqa: F811
    out = cli_json(capsys, "patch", "--clean", "the dog sat on the mat", "--corrupt", "the bat sat on the mat",
                   "--answer", "#40", "--wrong", "#41", "--model", str(tiny_llama_dir), "--point", "mlp_out")
    assert {"point", "layers", "positions", "matrix", "clean_logit_diff", "corrupt_logit_diff", "seconds"} <= set(out)
    assert out["point"] == "mlp_out" and out["layers"] == [0, 1]
    assert len(out["matrix"]) == 2 and all(len(row) == len(out["positions"]) for row in out["matrix"])
    assert out["clean_logit_diff"] != out["corrupt_logit_diff"]


def test_attribute_json_parts_sum_to_the_logit(capsys, tiny_llama_dir):  # noqa: F811
    out = cli_json(capsys, "attribute", "--prompt", "Hello world", "--model", str(tiny_llama_dir))
    assert {"token_id", "logit", "embed", "layers", "sum"} <= set(out)
    assert len(out["layers"]) == 2 and all(len(layer["heads"]) == 4 for layer in out["layers"])
    assert out["sum"] == pytest.approx(out["logit"], abs=1e-5 * max(1, abs(out["logit"])))


@pytest.mark.parametrize("args,code,message", [
    (["run", "--prompt", "hi", "--ablate-head", "2.0"], 1, "layer must be a whole number from 0 to 1, got '2'"),
    (["run", "--prompt", "hi", "--ablate-head", "0.4"], 1, "head must be a whole number from 0 to 3, got '4'"),
    (["run", "--prompt", "hi", "--ablate-mlp", "-1"], 1, "layer must be a whole number from 0 to 1"),
    (["run", "--prompt", "hi", "--scale-head", "0.1"], 1, "a scaled head is LAYER.HEAD=FACTOR"),
    (["run", "--prompt", "hi", "--steer", "1", "--steer-towards", " ", "--steer-away", "x"], 1, "two non-empty prompts"),
    (["run", "--prompt", "hi", "--steer-alpha", "nan"], 2, "steer-alpha must be a number in [0, 1000]"),
    (["run", "--prompt", "hi", "--ablate-head", "0.1", "--speculative", "ngram"], 1, "drop --speculative"),
    (["patch", "--clean", "a b", "--corrupt", "a b c", "--answer", "#1", "--wrong", "#2"], 1,
     "--corrupt 4: patching needs prompts of the same token length"),
    (["patch", "--clean", "a b", "--corrupt", "a c", "--answer", "#1", "--wrong", "#2", "--point", "z"], 2,
     "invalid choice: 'z'"),
    (["patch", "--clean", "a b", "--corrupt", "a c", "--answer", "#1", "--wrong", "#1"], 1, "the same token"),
    (["attribute", "--prompt", "hi", "--token", "hello world"], 1, "give one token's text"),
])
def test_bad_input_is_one_line(capsys, tiny_llama_dir, args, code, message):  # noqa: F811
    with pytest.raises(SystemExit) if code == 2 else _nothing() as info:
        rc = main([*args, "--model", str(tiny_llama_dir)])
    err = capsys.readouterr().err
    assert (info.value.code if code == 2 else rc) == code
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


class _nothing:
    value = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
