"""The serving tests' pieces: a request's greedy tokens run alone (`solo_greedy`, the reference every
batched run must equal), an untied tiny llama (`tiny_loaded`, module-scoped: import it explicitly), and a
shared system prompt of 3 blocks of 4 ids (`SYSTEM`)."""

from __future__ import annotations

import pytest

from inspector.engine.steps import decode_step, new_cache, prefill


def solo_greedy(model, prompt: list[int], max_new: int, eos: frozenset[int] = frozenset()) -> list[int]:
    cache = new_cache(model)
    logits = prefill(model, prompt, cache)
    out = [int(logits.argmax())]
    while len(out) < max_new and out[-1] not in eos:
        out.append(int(decode_step(model, out[-1], cache).argmax()))
    return out


@pytest.fixture(scope="module")
def tiny_loaded(tmp_path_factory):
    """The tiny random llama untied: the tied one greedily repeats a prompt's last token forever, which
    would make "same tokens as the solo run" hold for almost any bug."""
    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_checkpoint

    return load_model(str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_untied") / "m", tie=False)))


SYSTEM = [7, 19, 3, 88, 41, 5, 66, 12, 90, 23, 57, 31]  # a shared system prompt: 3 blocks of 4
