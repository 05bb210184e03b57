"""The generation loop in small pieces: prefill, one decode step, full recompute, and `generate()`.

The engine knows nothing about text: it takes token ids and returns next-token logits. The caller owns
the KV cache; each function here runs one forward and advances the cache once by the positions it
added (the model itself never advances it). A recorder, when given, is passed through to the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.sampling import SampleResult, generator_for, sample
from inspector.engine.trace import Recorder


def _ids(tokens: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([list(tokens)], dtype=torch.long, device=device)  # (1, T)


def new_cache(model: Transformer) -> KVCache:
    """An empty cache in the model's dtype and device."""
    w = model.model.embed_tokens.weight
    return KVCache(model.config, dtype=w.dtype, device=w.device)


@torch.inference_mode()
def prefill(model: Transformer, ids: Sequence[int], cache: KVCache, rec: Recorder | None = None) -> torch.Tensor:
    """One forward over all prompt tokens (written to the cache); the last position's logits (V,) fp32."""
    logits = model(_ids(ids, model.inv_freq.device), cache, rec, last_only=True)  # (1, 1, V)
    cache.advance(len(ids))
    return logits[0, -1].float()


@torch.inference_mode()
def decode_step(model: Transformer, token_id: int, cache: KVCache, rec: Recorder | None = None) -> torch.Tensor:
    """One forward of one token at position `cache.length`; the next-token logits (V,) fp32."""
    logits = model(_ids([token_id], model.inv_freq.device), cache, rec, last_only=True)  # (1, 1, V)
    cache.advance(1)
    return logits[0, -1].float()


def recompute_step(model: Transformer, ids: Sequence[int], rec: Recorder | None = None) -> tuple[torch.Tensor, KVCache]:
    """The no-cache path: the whole sequence from position 0 into a fresh cache; (logits (V,), that cache)."""
    cache = new_cache(model)
    return prefill(model, ids, cache, rec), cache


@dataclass
class Step:
    """One generated token: which, from what logits, how it was drawn and how long it took."""

    index: int  # 0 = sampled after the prefill
    token: int
    logits: torch.Tensor  # (V,) fp32
    result: SampleResult
    forward_ms: float
    sample_ms: float


def generate(model: Transformer, prompt_ids: Sequence[int], params: SamplingParams, max_new_tokens: int,
             eos_ids: Sequence[int] = (), *, use_cache: bool = True,
             rec_factory: Callable[[], Recorder] | None = None) -> Iterator[Step]:
    """Prefill, then decode one token per step until EOS or `max_new_tokens`; yields each `Step`.

    `use_cache=False` recomputes the full sequence every step. `rec_factory()`, when given, makes a fresh
    recorder for each forward."""
    ids = list(prompt_ids)
    cache = new_cache(model)
    for index in range(max_new_tokens):
        rec = rec_factory() if rec_factory is not None else None
        t0 = time.perf_counter()
        if index == 0:
            logits = prefill(model, ids, cache, rec)
        elif use_cache:
            logits = decode_step(model, ids[-1], cache, rec)
        else:
            logits, cache = recompute_step(model, ids, rec)
        t1 = time.perf_counter()
        result = sample(logits, params, generator_for(params.seed, len(ids)))
        t2 = time.perf_counter()
        ids.append(result.token)
        yield Step(index, result.token, logits, result, (t1 - t0) * 1e3, (t2 - t1) * 1e3)
        if result.token in eos_ids:
            return
