"""`Int8KVCache`: the engine's KV cache interface with keys and values held in int8.

Each cached vector (one head's key or value at one position, head_dim numbers) is quantized
symmetrically with its own fp32 scale: scale = max|x| / 127, q = round(x / scale). That is a scale per
head and per position, so a new token never rescales what is already stored, and an outlier in one head
does not cost the others precision. Per position this holds 2 x layers x kv_heads x (head_dim + 4) bytes
against fp32's 2 x layers x kv_heads x head_dim x 4 (0.27x for head_dim 64).

The model sees the same interface as `inspector.engine.kv_cache.KVCache` (which this subclasses for its
row bookkeeping: `lengths`, `advance`, `truncate`, `length`): `update` quantizes the new positions and
returns the dequantized K, V (B, kv_heads, S, head_dim) fp32 of positions 0..S-1, so attention reads
exactly what an int8 cache holds. `read` returns dequantized copies; `nbytes`, `layer_nbytes`,
`bytes_per_position` and `allocated_nbytes` count the int8 entries and their scales.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import ALLOCATION_STEP, KVCache, kv_bytes

SCALE_BYTES = 4  # one fp32 scale per head and position


def quantize_vectors(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., d) float -> (q int8 (..., d), scale fp32 (...)), symmetric per vector."""
    scale = x.float().abs().amax(dim=-1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x.float() / scale[..., None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize_vectors(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale[..., None]


class Int8KVCache(KVCache):
    def __init__(self, config: ModelConfig, *, batch: int = 1, device: torch.device | str = "cpu",
                 step: int = ALLOCATION_STEP) -> None:
        super().__init__(config, batch=batch, dtype=torch.float32, device=device, step=step)
        L = self.num_layers
        self._qk: list[torch.Tensor | None] = [None] * L  # (batch, kv_heads, capacity, head_dim) int8
        self._qv: list[torch.Tensor | None] = [None] * L
        self._sk: list[torch.Tensor | None] = [None] * L  # (batch, kv_heads, capacity) fp32
        self._sv: list[torch.Tensor | None] = [None] * L

    def _grow(self, layer: int, needed: int) -> None:
        old = self._qk[layer]
        if old is not None and old.shape[2] >= needed:
            return
        capacity = -(-needed // self.step) * self.step
        shape = (self.batch, self.kv_heads, capacity)
        bufs = [torch.zeros((*shape, self.head_dim), dtype=torch.int8, device=self.device) for _ in range(2)]
        bufs += [torch.ones(shape, dtype=torch.float32, device=self.device) for _ in range(2)]
        if old is not None:
            used = max(self.lengths)
            for new, prev in zip(bufs, (self._qk[layer], self._qv[layer], self._sk[layer], self._sv[layer])):
                new[:, :, :used] = prev[:, :, :used]
        self._qk[layer], self._qv[layer], self._sk[layer], self._sv[layer] = bufs

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               counts: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize and write k, v (batch, kv_heads, T, head_dim) as `KVCache.update`; returns the
        dequantized K, V (batch, kv_heads, S, head_dim) fp32, S = the longest row's end."""
        B, _, T, _ = k.shape
        if B != self.batch:
            raise ValueError(f"a forward of {B} rows on a cache of {self.batch}")
        counts = [T] * B if counts is None else counts
        end = max(s + n for s, n in zip(self.lengths, counts))
        self._grow(layer, end)
        qk, sk = quantize_vectors(k)  # (B, KV, T, d), (B, KV, T)
        qv, sv = quantize_vectors(v)
        for b, (s, n) in enumerate(zip(self.lengths, counts)):  # padded slots (past n) are never written
            self._qk[layer][b, :, s:s + n], self._sk[layer][b, :, s:s + n] = qk[b, :, :n], sk[b, :, :n]
            self._qv[layer][b, :, s:s + n], self._sv[layer][b, :, s:s + n] = qv[b, :, :n], sv[b, :, :n]
        keys = dequantize_vectors(self._qk[layer][:, :, :end], self._sk[layer][:, :, :end])
        values = dequantize_vectors(self._qv[layer][:, :, :end], self._sv[layer][:, :, :end])
        return keys, values  # (B, KV, S, d) fp32

    def read(self, layer: int, row: int = 0, end: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized keys and values of one row, positions 0..end-1, each (kv_heads, end, head_dim) fp32."""
        n = self.lengths[row]
        end = n if end is None else end
        if not 0 <= end <= n:
            raise ValueError(f"row {row} holds {n} positions; cannot read up to {end}")
        if self._qk[layer] is None:
            empty = torch.empty((self.kv_heads, 0, self.head_dim), dtype=torch.float32, device=self.device)
            return empty, empty
        return (dequantize_vectors(self._qk[layer][row, :, :end], self._sk[layer][row, :, :end]),
                dequantize_vectors(self._qv[layer][row, :, :end], self._sv[layer][row, :, :end]))

    @property
    def capacity(self) -> int:
        q = self._qk[0]
        return 0 if q is None else q.shape[2]

    @property
    def bytes_per_position(self) -> int:
        """K and V of one position, every layer: int8 numbers and one fp32 scale per head vector (`kv_bytes`)."""
        return kv_bytes(self.config, 1, 1, scale_bytes=SCALE_BYTES)

    def layer_nbytes(self, layer: int) -> int:
        """Bytes of K plus V (int8 entries and scales) in use by one layer, every row."""
        if self._qk[layer] is None:
            return 0
        return kv_bytes(self.config, sum(self.lengths), 1, scale_bytes=SCALE_BYTES) // self.num_layers

    @property
    def allocated_nbytes(self) -> int:
        bufs = (*self._qk, *self._qv, *self._sk, *self._sv)
        return sum(t.untyped_storage().nbytes() for t in bufs if t is not None)


def fp32_bytes_per_position(config: ModelConfig) -> int:
    """What an fp32 cache holds per position, for comparison."""
    return kv_bytes(config, 1, 4)


def new_kv_cache(model: torch.nn.Module, kv: str, batch: int = 1) -> KVCache:
    """An empty cache of `batch` rows in precision `kv` ("fp32" | "int8") on the model's device."""
    device = model.inv_freq.device
    if kv == "int8":
        return Int8KVCache(model.config, batch=batch, device=device)
    return KVCache(model.config, batch=batch, dtype=torch.float32, device=device)
