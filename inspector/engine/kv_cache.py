"""KV cache: per-layer K and V, each (batch, kv_heads, positions, head_dim), owned by the caller.

The model writes a forward's new keys/values with `update(layer, k, v)` at positions
[length, length + T) and reads back everything cached so far; the engine then calls `advance(T)` once
per forward. Storage grows in chunks of `step` positions (like mlx-lm); `truncate(pos)` rewinds for
branching. `nbytes` counts the entries in use (what the cache holds), `allocated_nbytes` the buffers.
"""

from __future__ import annotations

import torch

from inspector.engine.config import ModelConfig


class KVCache:
    def __init__(self, config: ModelConfig, *, batch: int = 1, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", step: int = 256) -> None:
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.batch, self.dtype, self.device, self.step = batch, dtype, torch.device(device), step
        self.keys: list[torch.Tensor | None] = [None] * self.num_layers
        self.values: list[torch.Tensor | None] = [None] * self.num_layers
        self.length = 0  # positions committed by `advance`

    def _grow(self, layer: int, needed: int) -> None:
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None and old_k.shape[2] >= needed:
            return
        capacity = -(-needed // self.step) * self.step  # round up to a whole number of steps
        shape = (self.batch, self.kv_heads, capacity, self.head_dim)
        new_k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        new_v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if old_k is not None:
            new_k[:, :, : self.length] = old_k[:, :, : self.length]
            new_v[:, :, : self.length] = old_v[:, :, : self.length]
        self.keys[layer], self.values[layer] = new_k, new_v

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, kv_heads, T, head_dim) after the committed positions; return all cached K, V."""
        end = self.length + k.shape[2]
        self._grow(layer, end)
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]  # (B, kv_heads, end, head_dim)

    def advance(self, n: int) -> None:
        """Commit n positions written by the forward that just ran (called once per forward)."""
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget every position >= length (to branch from an earlier step)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        self.length = length

    def layer_keys(self, layer: int) -> torch.Tensor:
        """Committed keys of one layer, (B, kv_heads, length, head_dim)."""
        return self.keys[layer][:, :, : self.length]

    @property
    def capacity(self) -> int:
        k = self.keys[0]
        return 0 if k is None else k.shape[2]

    @property
    def bytes_per_position(self) -> int:
        """K and V, every layer: 2 x layers x kv_heads x head_dim x bytes/elem."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.kv_heads * self.head_dim * elem

    @property
    def layer_nbytes(self) -> int:
        """Bytes of K plus V in use by one layer."""
        return self.bytes_per_position // self.num_layers * self.length

    @property
    def nbytes(self) -> int:
        return self.bytes_per_position * self.length

    @property
    def allocated_nbytes(self) -> int:
        return self.bytes_per_position * self.capacity
