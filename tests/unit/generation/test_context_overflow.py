"""Asking for more tokens than the context window holds: the run stops with "context_full" by default, or
goes on under a sliding window over the KV cache, on a model whose context is 24 tokens (never an index
error), in the session and in `inspector run`."""

from __future__ import annotations

import json

import pytest
from tests.support.tiny import make_tiny_checkpoint

from inspector.commands.cli import main
from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.models.loader import load_model
from inspector.session.session import OVERFLOW_SINKS, Session

CONTEXT = 24


@pytest.fixture(scope="module")
def small_context_dir(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ctx") / "tiny-ctx", max_position_embeddings=CONTEXT)


@pytest.fixture(scope="module")
def loaded(small_context_dir):
    return load_model(str(small_context_dir))


def play(loaded, prompt_ids, n, **kw) -> Session:
    session = Session(loaded, **kw)
    session.eos_ids = frozenset()  # random weights: keep going until the context or max tokens decides
    session.prefill_ids(prompt_ids, SamplingParams(), max_new_tokens=n)
    for _ in session.play(SamplingParams()):
        pass
    return session


def test_the_default_stops_when_the_context_is_full(loaded):
    session = play(loaded, list(range(10, 20)), 40)
    assert session.finished == "context_full"
    assert len(session.prompt_ids) + len(session.generated_ids) == CONTEXT


def test_window_goes_on_past_the_context_attending_to_at_most_a_context(loaded):
    session = play(loaded, list(range(10, 20)), 40, on_context_full="window")
    assert session.finished == "max_tokens" and len(session.generated_ids) == 40
    cache = session.cache
    held = cache.held_positions(0).tolist()
    assert len(held) == CONTEXT - 1  # the newest token's forward then attends to CONTEXT positions
    assert held[:OVERFLOW_SINKS] == list(range(OVERFLOW_SINKS))
    assert held[-1] == cache.length - 1
    # up to the context's end both runs are the same run
    stopped = play(loaded, list(range(10, 20)), 40)
    assert session.generated_ids[:len(stopped.generated_ids)] == stopped.generated_ids


def test_an_unknown_choice_names_the_allowed_ones(loaded):
    with pytest.raises(InputError, match="on context full must be one of stop, window, got 'wrap'"):
        Session(loaded, on_context_full="wrap")


def test_cli_offers_both(capsys, small_context_dir):
    args = ["run", "--prompt", "Hello world", "--model", str(small_context_dir), "--max-new-tokens", "60", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] in ("context_full", "eos")
    assert len(out["prompt_ids"]) + len(out["generated_ids"]) <= CONTEXT
    assert main(args + ["--on-context-full", "window"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] in ("max_tokens", "eos")
    if out["finished"] == "max_tokens":
        assert len(out["generated_ids"]) == 60
    with pytest.raises(SystemExit) as e:
        main(args + ["--on-context-full", "wrap"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'wrap'" in err and err.count("\n") == 1
