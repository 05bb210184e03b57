"""The generation paths give the same ids as before they shared one loop: plain decode (Session),
speculative decoding (prompt lookup and early exit) and the serving scheduler (parallel sampling), greedy and
seeded, on the default model. tests/data/generation_golden.json holds the ids these same calls produced
before the loop (commit 456ce8d); its prompts and settings are read from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspector.engine.config import SamplingParams

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "generation_golden.json").read_text())
N = GOLDEN["tokens"]
PARAMS = {name: SamplingParams(**values) for name, values in GOLDEN["params"].items()}
PROMPTS = GOLDEN["prompts"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded(default_model):
    return default_model  # the test run's one load of the real default model


def prompt_ids(loaded, i: int) -> list[int]:
    return loaded.tokenizer.prompt_ids(PROMPTS[i], True, None)


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_plain_decode(loaded, name, i):
    from inspector.session.session import Session

    s = Session(loaded, record=False)
    s.prefill_ids(prompt_ids(loaded, i), PARAMS[name], max_new_tokens=N)
    for _ in s.play(PARAMS[name]):
        pass
    assert s.generated_ids == GOLDEN["session"][f"{name}/{i}"]


@pytest.mark.parametrize("spec", ["ngram", "early-exit:8"])
@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_speculative(loaded, spec, name, i):
    from inspector.speculative.decoding import SpeculativeDecoder
    from inspector.speculative.drafters import make_drafter

    run = SpeculativeDecoder(loaded, make_drafter(spec, loaded.model), 4, PARAMS[name], max_new_tokens=N)
    run.prefill(prompt_ids(loaded, i))
    for _ in run.play():
        pass
    assert run.generated_ids == GOLDEN["speculative"][f"{name}/{spec}/{i}"]


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_serving_scheduler(loaded, name):
    from inspector.serving.paged_cache import PagedKVCache
    from inspector.serving.scheduler import Scheduler

    sched = Scheduler(loaded.model, PagedKVCache(loaded.config, 256, 16), max_batch=4, eos_ids=loaded.stop_ids)
    for i in range(len(PROMPTS)):
        sched.add(prompt_ids(loaded, i), N, i, n=2, params=PARAMS[name])
    sched.step_until_done(max_steps=500)
    assert [s.output_ids for s in sched.requests] == GOLDEN["serving"][name]
