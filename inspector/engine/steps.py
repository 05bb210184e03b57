"""One forward of the engine, and its small named uses: prefill, one decode step, a batched step, recompute.

The engine knows nothing about text: it takes token ids and returns next-token logits. The caller owns
the KV cache and the loop (`inspector.generation`: sampling, stopping, the levers); `forward` is the one
place a forward is run and the cache advanced, once, by the positions it added (the model itself never
advances it). A recorder, when given, is passed through to the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.trace import Recorder


def new_cache(model: Transformer, batch: int = 1) -> KVCache:
    """An empty cache of `batch` rows in the model's dtype and device."""
    w = model.model.embed_tokens.weight
    return KVCache(model.config, batch=batch, dtype=w.dtype, device=w.device)


@torch.inference_mode()
def forward(model: Transformer, cache: KVCache, rows: Sequence[Sequence[int]], rec: Recorder | None = None, *,
        all_positions: bool = False, n_layers: int | None = None,
        start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
    """The one forward: row b of the cache feeds rows[b] (one or more new token ids: a prompt, a decode
    token, or a token and k drafts) after the positions it holds; then the cache advances by each row's
    count. Returns fp32 logits (B, V) of each row's last token, or (B, T, V) of every position with
    `all_positions` (rows of one length only). `n_layers` runs only the first blocks (early exit); `start`
    = (L, residual (B, T, D)) begins at block L (see `Transformer.forward`)."""
    if len(rows) != cache.batch or not all(rows):
        raise ValueError(f"a forward needs one non-empty list of ids per cache row ({cache.batch})")
    device = model.inv_freq.device
    B, T = len(rows), max(len(r) for r in rows)
    if all(len(r) == T for r in rows) and (B == 1 or len(set(cache.lengths)) == 1):
        ids = torch.tensor([list(r) for r in rows], dtype=torch.long, device=device)  # (B, T)
        positions = None
    else:
        if all_positions:
            raise ValueError("every position's logits need rows of one length at one position")
        ids = torch.zeros((B, T), dtype=torch.long, device=device)  # padded slots feed token 0 (discarded)
        positions = torch.full((B, T), -1, dtype=torch.long, device=device)
        for b, r in enumerate(rows):
            first = cache.lengths[b]
            ids[b, :len(r)] = torch.tensor(list(r), dtype=torch.long)
            positions[b, :len(r)] = torch.arange(first, first + len(r))
    logits = model(ids, cache, rec, positions=positions, last_only=not all_positions, n_layers=n_layers, start=start)
    cache.advance([len(r) for r in rows])
    return logits.float() if all_positions else logits[:, -1].float()  # (B, T, V) or (B, V)


def prefill(model: Transformer, ids: Sequence[int], cache: KVCache, rec: Recorder | None = None) -> torch.Tensor:
    """One forward over all prompt tokens (written to the cache); the last position's logits (V,) fp32."""
    return forward(model, cache, [ids], rec)[0]


def decode_step(model: Transformer, token_id: int, cache: KVCache, rec: Recorder | None = None) -> torch.Tensor:
    """One forward of one token at position `cache.length`; the next-token logits (V,) fp32."""
    return forward(model, cache, [[token_id]], rec)[0]


def step_rows(model: Transformer, rows: Sequence[Sequence[int]], cache: KVCache,
              rec: Recorder | None = None) -> torch.Tensor:
    """One forward over several requests: row b feeds rows[b] (one or more new token ids; a prompt or a
    decode token) after the positions cache row b holds. Returns each row's next-token logits (B, V) fp32."""
    return forward(model, cache, rows, rec)


def recompute_step(model: Transformer, ids: Sequence[int], rec: Recorder | None = None) -> tuple[torch.Tensor, KVCache]:
    """The no-cache path: the whole sequence from position 0 into a fresh cache; (logits (V,), that cache)."""
    cache = new_cache(model)
    return prefill(model, ids, cache, rec), cache
