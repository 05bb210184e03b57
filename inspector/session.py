"""A generation session over one loaded model: prefill, step, play, branch, resample.

The session owns the KV cache (the model never does) and the list of `ForwardRecord`s. It knows the
tokenizer (chat template, incremental detokenization); the model knows nothing about text.
(CONTRACT STUB — implemented by the engine work. Signatures are what the UI and CLI call.)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from inspector.config import SamplingParams
from inspector.loader import LoadedModel
from inspector.records import ForwardRecord, SampleRecord


class Session:
    def __init__(self, loaded: LoadedModel, *, recompute: bool = False, record: bool = True) -> None:
        self.loaded = loaded
        self.recompute = recompute  # True: every decode step runs the full sequence without the cache
        self.records: list[ForwardRecord] = []
        self.prompt_ids: list[int] = []
        self.generated_ids: list[int] = []  # sampled tokens (the last one is not in the cache yet)
        self.text: str = ""  # generated text, grown by incremental detokenization
        self.finished: str | None = None  # None | "eos" | "max_tokens" | "context_full"

    def prefill(self, prompt: str, params: SamplingParams, *, chat: bool = False,
                system: str | None = None, max_new_tokens: int = 64) -> ForwardRecord:
        """Tokenize (chat template optional), run one forward over all prompt tokens, sample token 1.

        Raises InputError on an empty prompt or one that leaves no room in the context window."""
        raise NotImplementedError

    def step(self, params: SamplingParams) -> ForwardRecord:
        """Feed the last sampled token (one forward of one token), sample the next. InputError if finished
        or not prefilled."""
        raise NotImplementedError

    def play(self, params: SamplingParams) -> Iterator[ForwardRecord]:
        """Step until EOS, max_new_tokens or the context end (sets `finished`)."""
        raise NotImplementedError

    def branch(self, step: int, token_id: int) -> None:
        """Force `token_id` as the token sampled at `step` (0 = the prefill's sample), drop what followed
        (truncating the KV cache), and continue from there."""
        raise NotImplementedError

    def preview_sample(self, params: SamplingParams, step: int | None = None) -> SampleRecord:
        """Re-run sampling (no model) on a step's stored logits with other params; same seed rule as step."""
        raise NotImplementedError

    def resample(self, params: SamplingParams) -> ForwardRecord:
        """Re-draw the newest step's token from its stored logits with `params` (no model rerun)."""
        raise NotImplementedError

    # Attention, computed on demand from stored queries and cached keys (rows sum to 1, causal).
    def attention_row(self, step: int, layer: int, head: int, query_index: int = -1) -> np.ndarray:
        """Weights (n_keys,) of one query position of the forward at `step` over all keys it saw."""
        raise NotImplementedError

    def attention_pattern(self, step: int, layer: int, head: int) -> np.ndarray:
        """(n_new, n_keys) weights of every query of the forward at `step`; causal, rows sum to 1."""
        raise NotImplementedError

    def attention_overview(self, step: int, query_index: int = -1) -> np.ndarray:
        """(num_layers, num_heads, n_keys) rows of one query position, every layer and head."""
        raise NotImplementedError

    def token_pieces(self) -> list[str]:
        """Display pieces of prompt + generated tokens, by position."""
        raise NotImplementedError
