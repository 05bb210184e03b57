"""KV cache: per layer, K and V buffers of shape (batch, kv_heads, capacity, head_dim), owned by the caller.

Each row (one request of a batch) has its own committed length, `lengths[row]`. A forward writes row b's
new keys/values with `update(layer, k, v, counts)` at positions [lengths[b], lengths[b] + counts[b]) and
reads back every row's keys up to the longest row's end; positions past a row's own end hold stale
entries that the model's causal mask hides. The engine then commits the forward with `advance(counts)`,
once per forward (the model never does). `truncate(length, row=None)` rewinds rows for branching.

Storage grows in chunks of `step` positions (like mlx-lm), the same capacity for every row.

Eviction (a KV-cache policy's lever), two position conventions:
- Masking, original positions (H2O): `evict(layer, row, positions, head=None)` marks cached positions of
  one layer and row (of one KV head, or all) as evicted; attention then masks them like future keys
  (`evicted_mask`). Kept entries keep their absolute positions and rotary phase (positions are never
  renumbered), so position p's key is still at index p; `held_positions(layer, row, head=None)` lists what
  a layer (a head, or any head) still attends to, and `kept_nbytes` counts the kept entries' bytes, head
  by head. The storage of an evicted entry is not reused (the buffers stay indexed by position).
  Truncating a row forgets its evictions past the new length.
- Compaction, contiguous positions (StreamingLLM): `compact(row, keep, rotate)` moves the kept positions
  of a row (every layer) to indices 0..n-1 and sets the row's length to n, so the next token is written,
  and rotated, at position n. The cache stores post-RoPE keys: `rotate(k, delta)` turns each kept key by
  its shift (new index - old position; RoPE rotations compose), so every kept key carries the phase of
  its new index. After a compaction the row's index i is no longer the token's place in the text: the
  caller keeps that mapping (truncate then counts compacted indices).

Reading: `read(layer, row=0, end=None) -> (k, v)`, each (kv_heads, end, head_dim), are views of the
committed positions (valid until the next write; clone to keep them). Bytes: `nbytes` counts the entries
in use and `layer_nbytes(layer)` one layer's, both measured from those views; `allocated_nbytes` is the
storage of the buffers actually allocated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from inspector.engine.config import ModelConfig


ALLOCATION_STEP = 256  # positions a cache grows by when it runs out of room


class KVCache:
    def __init__(self, config: ModelConfig, *, batch: int = 1, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", step: int = ALLOCATION_STEP) -> None:
        self.config = config
        self.num_layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.batch, self.dtype, self.device, self.step = batch, dtype, torch.device(device), step
        self._keys: list[torch.Tensor | None] = [None] * self.num_layers  # (batch, kv_heads, capacity, head_dim)
        self._values: list[torch.Tensor | None] = [None] * self.num_layers
        # (batch, kv_heads, capacity) bool per layer, None until the layer evicts; `_per_head[layer]` once
        # one KV head evicted what another kept (the mask then widens to query heads)
        self._evicted: list[torch.Tensor | None] = [None] * self.num_layers
        self._per_head: list[bool] = [False] * self.num_layers
        self.lengths: list[int] = [0] * batch  # positions committed by `advance`, per row

    # ---- writing (the model) and committing (the engine)
    def _grow(self, layer: int, needed: int) -> None:
        old_k, old_v = self._keys[layer], self._values[layer]
        if old_k is not None and old_k.shape[2] >= needed:
            return
        capacity = -(-needed // self.step) * self.step  # round up to a whole number of steps
        shape = (self.batch, self.kv_heads, capacity, self.head_dim)
        # Zero-filled, so the stale slots a row's mask hides are finite (0 x stale value stays 0).
        new_k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        new_v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if old_k is not None:
            used = max(self.lengths)
            new_k[:, :, :used] = old_k[:, :, :used]
            new_v[:, :, :used] = old_v[:, :, :used]
        self._keys[layer], self._values[layer] = new_k, new_v

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               counts: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (batch, kv_heads, T, head_dim): row b's first counts[b] positions (all T when counts is
        None) after its committed ones. Returns K, V (batch, kv_heads, S, head_dim) of positions 0..S-1,
        S = the longest row's end."""
        B, _, T, _ = k.shape
        if B != self.batch:
            raise ValueError(f"a forward of {B} rows on a cache of {self.batch}")
        starts = self.lengths
        if counts is None and B == 1:
            end = starts[0] + T
            self._grow(layer, end)
            self._keys[layer].narrow(2, starts[0], T).copy_(k)
            self._values[layer].narrow(2, starts[0], T).copy_(v)
        else:
            counts = [T] * B if counts is None else counts
            end = max(s + n for s, n in zip(starts, counts))
            self._grow(layer, end)
            for b, (s, n) in enumerate(zip(starts, counts)):
                self._keys[layer][b, :, s:s + n] = k[b, :, :n]  # padded slots (past n) are never written
                self._values[layer][b, :, s:s + n] = v[b, :, :n]
        return self._keys[layer].narrow(2, 0, end), self._values[layer].narrow(2, 0, end)  # (B, kv_heads, S, head_dim)

    def advance(self, counts: int | Sequence[int]) -> None:
        """Commit the positions the forward that just ran wrote: n for every row, or counts[b] for row b."""
        if isinstance(counts, int):
            counts = [counts] * self.batch
        if len(counts) != self.batch:
            raise ValueError(f"advance got {len(counts)} counts for {self.batch} rows")
        self.lengths = [n0 + n for n0, n in zip(self.lengths, counts)]

    def truncate(self, length: int, row: int | None = None) -> None:
        """Forget every position >= length of one row (every row when row is None), to branch."""
        rows = range(self.batch) if row is None else [row]
        for r in rows:
            if not 0 <= length <= self.lengths[r]:
                raise ValueError(f"cannot truncate row {r} of {self.lengths[r]} positions to {length}")
        for r in rows:
            self.lengths[r] = length
            for e in self._evicted:
                if e is not None:
                    e[r, :, length:] = False

    # ---- eviction (a KV-cache policy)
    def evict(self, layer: int, row: int, positions: torch.Tensor | Sequence[int], head: int | None = None) -> None:
        """Mark committed `positions` of one layer and row (one KV head, or every head) as evicted: attention
        no longer reads them."""
        positions = torch.as_tensor(positions, dtype=torch.long, device=self.device)
        if positions.numel() == 0:
            return
        if int(positions.min()) < 0 or int(positions.max()) >= self.lengths[row]:
            raise ValueError(f"row {row} holds positions 0..{self.lengths[row] - 1}; cannot evict {positions.tolist()}")
        flags = self._evicted_upto(layer, max(self.lengths))
        if head is None:
            flags[row, :, positions] = True
        else:
            if not 0 <= head < self.kv_heads:
                raise ValueError(f"no KV head {head}: the cache has {self.kv_heads}")
            flags[row, head, positions] = True
            self._per_head[layer] = self._per_head[layer] or self.kv_heads > 1

    def _evicted_upto(self, layer: int, end: int) -> torch.Tensor:
        """This layer's (batch, kv_heads, >= end) eviction flags, created or widened (False) as needed."""
        e = self._evicted[layer]
        if e is None or e.shape[2] < end:
            wider = torch.zeros((self.batch, self.kv_heads, max(end, self.step)), dtype=torch.bool, device=self.device)
            if e is not None:
                wider[:, :, :e.shape[2]] = e
            self._evicted[layer] = e = wider
        return e

    def evicted_mask(self, layer: int, end: int) -> torch.Tensor | None:
        """(batch, 1, 1, end) bool, True at evicted positions, broadcast over heads and queries; (batch,
        query heads, 1, end) once the layer's KV heads evicted differently (KV head h serves query heads
        h * n_rep ..). None when this layer evicted nothing."""
        if self._evicted[layer] is None:
            return None
        e = self._evicted_upto(layer, end)[:, :, :end]  # (B, KV, end)
        if not self._per_head[layer]:
            return e[:, :1, None]  # (B, 1, 1, end)
        return e.repeat_interleave(self.config.n_rep, dim=1)[:, :, None]  # (B, H, 1, end)

    def held_positions(self, layer: int, row: int = 0, head: int | None = None) -> torch.Tensor:
        """The absolute positions one layer of one row still attends to (committed, not evicted), ascending:
        those of KV head `head`, or of any head."""
        n = self.lengths[row]
        if self._evicted[layer] is None:
            return torch.arange(n, device=self.device)
        flags = self._evicted_upto(layer, n)[row, :, :n]  # (KV, n)
        gone = flags.all(dim=0) if head is None else flags[head]
        return torch.nonzero(~gone).flatten()

    @property
    def kept_nbytes(self) -> int:
        """Bytes of K plus V of the entries attention still reads, every layer, row and KV head."""
        per_head_entry = self.bytes_per_position // (self.num_layers * self.kv_heads)
        total = 0
        for layer in range(self.num_layers):
            for row in range(self.batch):
                n = self.lengths[row]
                e = self._evicted[layer]
                kept = n * self.kv_heads if e is None else int((~e[row, :, :n]).sum())
                total += kept * per_head_entry
        return total

    @torch.inference_mode()  # the buffers are written under inference mode by the forward: so is this
    def compact(self, row: int, keep: torch.Tensor | Sequence[int],
                rotate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> None:
        """Move the kept committed positions `keep` (ascending) of one row to indices 0..n-1 in every layer,
        forget the rest and the row's evictions, and make n its length (see the module docstring).
        `rotate(k (kv_heads, n, head_dim), delta (n,)) -> k` re-rotates the kept keys by their shifts."""
        keep = torch.as_tensor(keep, dtype=torch.long, device=self.device)
        n_old = self.lengths[row]
        if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n_old or bool((keep.diff() <= 0).any())):
            raise ValueError(f"keep must be ascending positions of row {row} (0..{n_old - 1})")
        n = keep.numel()
        if any(k is None for k in self._keys) and n_old:
            raise ValueError("this cache does not hold its entries in plain buffers: it cannot compact")
        delta = torch.arange(n, device=self.device) - keep  # (n,) <= 0: each key moves back by this much
        for layer in range(self.num_layers):
            k, v = self._keys[layer], self._values[layer]
            if k is None:
                continue
            kept_k, kept_v = k[row, :, keep], v[row, :, keep]  # (KV, n, d) copies (advanced indexing)
            if rotate is not None and bool((delta != 0).any()):
                kept_k = rotate(kept_k, delta)
            k[row, :, :n], v[row, :, :n] = kept_k, kept_v
            if self._evicted[layer] is not None:
                self._evicted[layer][row] = False
        self.lengths[row] = n

    # ---- reading
    @property
    def length(self) -> int:
        """Committed positions, the same in every row (ValueError when rows differ: use `lengths`)."""
        first = self.lengths[0]
        if any(n != first for n in self.lengths):
            raise ValueError(f"rows hold different lengths {self.lengths}: read cache.lengths[row]")
        return first

    def read(self, layer: int, row: int = 0, end: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Committed keys and values of one row, positions 0..end-1 (default: all), each (kv_heads, end, head_dim)."""
        n = self.lengths[row]
        end = n if end is None else end
        if not 0 <= end <= n:
            raise ValueError(f"row {row} holds {n} positions; cannot read up to {end}")
        k, v = self._keys[layer], self._values[layer]
        if k is None:
            empty = torch.empty((self.kv_heads, 0, self.head_dim), dtype=self.dtype, device=self.device)
            return empty, empty
        return k[row, :, :end], v[row, :, :end]

    @property
    def capacity(self) -> int:
        """Positions allocated per row (the buffers' third dimension)."""
        k = self._keys[0]
        return 0 if k is None else k.shape[2]

    @property
    def bytes_per_position(self) -> int:
        """What one more position of one row costs: K and V, every layer (`kv_bytes`)."""
        return kv_bytes(self.config, 1, torch.empty((), dtype=self.dtype).element_size())

    def layer_nbytes(self, layer: int) -> int:
        """Bytes of K plus V in use by one layer, every row: what the committed views (`read`) hold, counted
        from the buffers' shapes and each row's length (a session asks for every layer after each forward)."""
        k, v = self._keys[layer], self._values[layer]
        if k is None:
            return 0
        per_position = k.shape[1] * k.shape[3] * k.element_size() + v.shape[1] * v.shape[3] * v.element_size()
        return sum(self.lengths) * per_position  # (kv_heads, n, head_dim) views of K and V per row

    @property
    def nbytes(self) -> int:
        """Bytes of K plus V in use, every layer and row."""
        return sum(self.layer_nbytes(layer) for layer in range(self.num_layers))

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the K and V buffers allocated (their storage), every layer."""
        return sum(t.untyped_storage().nbytes() for t in (*self._keys, *self._values) if t is not None)

    def reorder(self, rows: list[int]) -> None:
        """Row b becomes a copy of what row rows[b] held (keys, values, eviction flags, length): beam search
        moves each surviving beam's cache to its new row; a row may be copied to several rows."""
        if len(rows) != self.batch or not all(0 <= r < self.batch for r in rows):
            raise ValueError(f"reorder needs {self.batch} rows in 0..{self.batch - 1}, got {rows}")
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        for store in (self._keys, self._values, self._evicted):
            for layer, t in enumerate(store):
                if t is not None:
                    store[layer] = t.index_select(0, index)
        self.lengths = [self.lengths[r] for r in rows]


def kv_bytes(config: ModelConfig, positions: int = 1, bytes_per_element: int = 4, batch: int = 1,
             scale_bytes: int = 0) -> int:
    """The KV-cache size formula, the one place it is written: K and V (2) × layers × kv_heads × (head_dim ×
    bytes per element + `scale_bytes`) × positions × batch. `scale_bytes` is what each cached head vector
    holds besides its numbers (an int8 cache's fp32 scale: 4). A full cache: no rounding up to allocation
    steps or pages (pass the allocated positions for that)."""
    per_vector = config.head_dim * bytes_per_element + scale_bytes
    return 2 * config.num_hidden_layers * config.num_key_value_heads * per_vector * positions * batch
