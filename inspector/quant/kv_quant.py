"""`KiviKVCache`: a KV cache quantized KIVI-style (Liu et al. 2024), int8 or int4, keys per channel and
values per token.

- Values: each cached value vector (one head, one position, head_dim numbers) is quantized
  asymmetrically on its own (a scale and a zero point per head and position) as it is written.
- Keys: outliers in keys sit in fixed channels, so keys are quantized per channel over a group of
  `group` positions (a scale and a zero point per head, channel and group). A group is quantized once it
  is complete; the newest, incomplete group stays in full precision (KIVI's residual).
- Asymmetric b-bit quantization of x over its group: scale = (max - min) / (2^b - 1),
  q = round((x - min) / scale), x' = q * scale + min.

The buffers hold the dequantized numbers x' (fp32), which is exactly what attention reads from a cache
holding the codes; the codes themselves are not stored. Byte counts are those of a cache that holds the
codes packed (int4: two per byte) with fp16 scales and zero points and an fp32 residual:
per layer, KV head and position, values head_dim * b / 8 + 4; quantized keys head_dim * b / 8 plus
4 * head_dim / group for their group's scales; residual keys head_dim * 4.

Everything else (rows, lengths, truncation, eviction masks) is `inspector.engine.kv_cache.KVCache`'s.
Compaction (re-rotated positions) is refused: it would break the key groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import ALLOCATION_STEP, KVCache

KIVI_GROUP = 32  # positions per key group (KIVI's default group size)
PARAM_BYTES = 4  # an fp16 scale and an fp16 zero point


def fake_quantize(x: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """x quantized asymmetrically to `bits` along `dim` (min and max over that dim), then dequantized."""
    levels = 2 ** bits - 1
    lo, hi = x.amin(dim=dim, keepdim=True), x.amax(dim=dim, keepdim=True)
    scale = (hi - lo) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round((x - lo) / scale).clamp_(0, levels) * scale + lo


class KiviKVCache(KVCache):
    def __init__(self, config: ModelConfig, bits: int, *, group: int = KIVI_GROUP, batch: int = 1,
                 device: torch.device | str = "cpu", step: int = ALLOCATION_STEP) -> None:
        if bits not in (4, 8):
            raise ValueError(f"a KIVI cache holds 4 or 8 bits, not {bits}")
        super().__init__(config, batch=batch, dtype=torch.float32, device=device, step=step)
        self.bits, self.group = bits, group
        self._done = [[0] * batch for _ in range(self.num_layers)]  # per layer and row: keys quantized so far

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               counts: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write as `KVCache.update` with values quantized per token and every completed key group per
        channel; returns K, V (batch, kv_heads, S, head_dim) as the cache holds them."""
        T = k.shape[2]
        counts = [T] * k.shape[0] if counts is None else counts
        ends = [s + n for s, n in zip(self.lengths, counts)]
        keys, values = super().update(layer, k, fake_quantize(v.float(), self.bits, dim=-1), counts)
        G = self.group
        for b, end in enumerate(ends):
            done, full = self._done[layer][b], end // G * G
            for g0 in range(done, full, G):
                block = self._keys[layer][b, :, g0:g0 + G]  # (KV, G, d): one group of positions
                self._keys[layer][b, :, g0:g0 + G] = fake_quantize(block, self.bits, dim=1)  # per channel
            self._done[layer][b] = max(done, full)
        return keys, values

    def truncate(self, length: int, row: int | None = None) -> None:
        super().truncate(length, row)
        for per_row in self._done:
            for r in range(self.batch) if row is None else [row]:
                per_row[r] = min(per_row[r], length // self.group * self.group)

    def compact(self, row: int, keep: torch.Tensor | Sequence[int],
                rotate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> None:
        raise ValueError("a KIVI-quantized cache keeps keys in groups of positions: it cannot compact")

    @property
    def bytes_per_position(self) -> int:
        """K and V of one position, every layer, once its key group is quantized (see the module docstring)."""
        d = self.head_dim
        per_head = 2 * d * self.bits // 8 + PARAM_BYTES + PARAM_BYTES * d // self.group
        return self.num_layers * self.kv_heads * per_head

    def layer_nbytes(self, layer: int) -> int:
        """Bytes of one layer's K and V as codes, scales and the fp32 key residual, every row."""
        d, KV = self.head_dim, self.kv_heads
        total = 0
        for row in range(self.batch):
            n, done = self.lengths[row], min(self._done[layer][row], self.lengths[row])
            values = n * (d * self.bits // 8 + PARAM_BYTES)
            keys = done * d * self.bits // 8 + (done // self.group) * PARAM_BYTES * d + (n - done) * d * 4
            total += KV * (values + keys)
        return total

    @property
    def kept_nbytes(self) -> int:
        """`nbytes` scaled, layer by layer, by the share of entries a policy kept."""
        total = 0
        for layer in range(self.num_layers):
            entries = sum(self.lengths) * self.kv_heads
            e = self._evicted[layer]
            kept = entries if e is None else sum(int((~e[r, :, :self.lengths[r]]).sum()) for r in range(self.batch))
            total += self.layer_nbytes(layer) * kept // max(entries, 1)
        return total
