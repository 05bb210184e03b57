"""Fixtures for the viz/UI unit tests: a real `Session` over a tiny random model (2 layers, 4 query heads,
2 KV heads), prefilled and stepped, so builders are tested on records the engine actually produces.

Import the fixtures explicitly: `from tests.support.viz_records import tiny_loaded, tiny_run  # noqa: F401`.
"""

from __future__ import annotations

import pytest

from inspector.engine.config import SamplingParams

PROMPT = "The quick brown fox jumps"
STEPS = 3


@pytest.fixture(scope="session")
def tiny_loaded(tmp_path_factory):
    """A LoadedModel over a tiny random llama checkpoint (GQA: 4 query heads share 2 KV heads)."""
    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_checkpoint

    return load_model(str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_viz"))))


@pytest.fixture(scope="session")
def tiny_run(tiny_loaded):
    """A session after prefill + STEPS decode steps with temperature 0.8, top-k 5 (so filters remove tokens)."""
    from inspector.session.session import Session

    s = Session(tiny_loaded, lens=True)  # the lens table reads every step's lens
    params = SamplingParams(temperature=0.8, top_k=5, seed=1)
    s.prefill(PROMPT, params, max_new_tokens=20)
    for _ in range(STEPS):
        s.step(params)
    return s


class FakePrefill:
    """The few fields of a prefill ForwardRecord the tour, weights and timing steps read (`n` tokens, no sample)."""

    def __init__(self, n: int) -> None:
        import numpy as np

        self.kind, self.step, self.start_pos, self.token_ids = "prefill", 0, 0, list(range(n))
        self.kv, self.resid_post, self.sample = [], np.zeros((1, n)), None
        self.forward_ms, self.sample_ms, self.tokenize_ms = 10.0, 0.1, 0.5

    @property
    def n_new(self) -> int:
        return len(self.token_ids)
