"""The generation loop in small pieces: prefill, one decode step, a batched step, full recompute.

The engine knows nothing about text: it takes token ids and returns next-token logits. The caller owns
the KV cache and the loop (sampling, stopping); each function here runs one forward and advances the
cache once by the positions it added (the model itself never advances it). A recorder, when given, is
passed through to the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.trace import Recorder


def _ids(tokens: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([list(tokens)], dtype=torch.long, device=device)  # (1, T)


def new_cache(model: Transformer, batch: int = 1) -> KVCache:
    """An empty cache of `batch` rows in the model's dtype and device."""
    w = model.model.embed_tokens.weight
    return KVCache(model.config, batch=batch, dtype=w.dtype, device=w.device)


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


@torch.inference_mode()
def step_rows(model: Transformer, rows: Sequence[Sequence[int]], cache: KVCache,
              rec: Recorder | None = None) -> torch.Tensor:
    """One forward over several requests: row b feeds rows[b] (one or more new token ids; a prompt or a
    decode token) after the positions cache row b holds. Returns each row's next-token logits (B, V) fp32."""
    if len(rows) != cache.batch or not all(rows):
        raise ValueError(f"step_rows needs one non-empty list of ids per cache row ({cache.batch})")
    device = model.inv_freq.device
    B, T = len(rows), max(len(r) for r in rows)
    ids = torch.zeros((B, T), dtype=torch.long, device=device)  # padded slots feed token 0 (discarded)
    positions = torch.full((B, T), -1, dtype=torch.long, device=device)
    for b, r in enumerate(rows):
        start = cache.lengths[b]
        ids[b, :len(r)] = torch.tensor(list(r), dtype=torch.long)
        positions[b, :len(r)] = torch.arange(start, start + len(r))
    logits = model(ids, cache, rec, positions=positions, last_only=True)  # (B, 1, V)
    cache.advance([len(r) for r in rows])
    return logits[:, -1].float()


def recompute_step(model: Transformer, ids: Sequence[int], rec: Recorder | None = None) -> tuple[torch.Tensor, KVCache]:
    """The no-cache path: the whole sequence from position 0 into a fresh cache; (logits (V,), that cache)."""
    cache = new_cache(model)
    return prefill(model, ids, cache, rec), cache
