"""Paged KV cache (PagedAttention's memory layout): a shared pool of fixed-size blocks, a block table per sequence.

- `BlockManager`: the pool's bookkeeping, a free list and a reference count per block (nano-vllm's name).
  It knows nothing about tensors.
- `PagedKVCache`: the storage, per layer K and V of `num_blocks * block_size` token slots, plus one
  `BlockTable` per sequence (its blocks, in order, and its committed length). Token position p of a
  sequence lives in slot `table.blocks[p // block_size] * block_size + p % block_size`.
  - `add(seq_id, max_len)` starts an empty sequence; `free(seq_id)` releases its blocks (a block returns to
    the free list when no sequence references it any more).
  - `fork(parent, child)`: the child shares every block of the parent (reference counts + 1), for parallel
    sampling of n continuations of one prompt. Writing into a block another sequence also references
    copies it first (copy on write): only the last, partial block is ever written again.
  - `reserve(seq_id, n)` makes room for n more positions (blocks allocated on demand, shared blocks copied
    before they are written), all or nothing: `OutOfBlocks` leaves every table as it was.
  - `batch(seq_ids) -> PagedBatch`: a view over some sequences that the model takes as its cache.
- `PagedBatch` presents the part of `inspector.engine.kv_cache.KVCache` that `Transformer.forward` and
  `inspector.engine.steps.step_rows` use: `batch`, `lengths`, `update(layer, k, v, counts)`,
  `advance(counts)`, plus `read(layer, row)`. `update` scatters each row's new keys/values into its blocks
  and gathers every row's positions 0..S-1 back into (B, KV, S, d) (a gather: correct, not fast); slots past
  a row's end read a zero slot, which the model's causal mask hides.
- Prefix caching (`prefix_caching=True`, vLLM's automatic prefix caching): a full block is keyed by the
  hash of its tokens chained with its parent block's hash, so equal keys mean equal tokens at equal
  positions from position 0. `commit_tokens(seq_id, tokens)` registers the sequence's newly full blocks;
  `match_prefix(seq_id, tokens)` gives a new sequence the cached blocks of its longest cached prefix of
  whole blocks (reference counts + 1; at least one prompt token is left to compute) and returns the
  positions it now holds. A block whose last reference goes keeps its content and hash on the free list,
  which is kept in least-recently-freed order: allocation takes the oldest free block first, and
  allocating a cached one evicts its hash (LRU eviction of free cached blocks). `prefix_stats()`: blocks
  looked up and hit, tokens reused, blocks shared now.
- Memory: `usage()` gives blocks and bytes in use against what contiguous caches reserved up to each
  sequence's max length would take (`reserved_contiguous_bytes`); the difference is the waste paging saves.
  The pool itself is allocated once (`pool_nbytes`), as vLLM does.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import kv_bytes


class OutOfBlocks(RuntimeError):
    """The pool has fewer free blocks than an allocation needs (nothing was allocated)."""


class BlockManager:
    """Free list and reference counts of `num_blocks` blocks (ids 0..num_blocks-1)."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"a pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_ids: deque[int] = deque(range(num_blocks))  # lowest id first: deterministic placement

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_ids)

    def allocate(self) -> int:
        if not self.free_ids:
            raise OutOfBlocks("no free block left in the pool")
        block = self.free_ids.popleft()
        self.ref_counts[block] = 1
        return block

    def incref(self, block: int) -> None:
        if self.ref_counts[block] < 1:
            raise ValueError(f"block {block} is free; cannot share it")
        self.ref_counts[block] += 1

    def release(self, block: int) -> None:
        """Drop one reference; the block goes back to the free list when none is left."""
        if self.ref_counts[block] < 1:
            raise ValueError(f"block {block} is already free")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_ids.append(block)


@dataclass
class BlockTable:
    """One sequence's blocks in position order and the positions committed to them."""

    blocks: list[int] = field(default_factory=list)
    length: int = 0
    max_len: int | None = None  # what a contiguous cache would reserve for it (prompt + max new tokens)


@dataclass(frozen=True)
class CacheUsage:
    """A snapshot of the pool: blocks, token positions and bytes (K and V, every layer)."""

    blocks_total: int
    blocks_used: int
    tokens_stored: int  # committed positions, summed over sequences (shared prompt positions counted per sequence)
    bytes_used: int  # blocks in use x bytes per block (a shared block counts once)
    bytes_contiguous: int  # contiguous caches reserved to each sequence's max length
    bytes_per_block: int

    @property
    def waste_bytes(self) -> int:
        """What contiguous per-request caches would hold beyond the paged blocks in use."""
        return self.bytes_contiguous - self.bytes_used


class PrefixStats(NamedTuple):
    lookups: int  # full prompt blocks looked up
    hits: int  # of those, found cached
    tokens_reused: int  # positions sequences got without computing them
    blocks_shared: int  # blocks referenced by more than one sequence now

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


class PagedKVCache:
    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int = 16, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 prefix_caching: bool = False) -> None:
        if block_size < 1:
            raise ValueError(f"block size must be at least 1, got {block_size}")
        self.config = config
        self.num_layers = config.num_hidden_layers
        self.kv_heads, self.head_dim = config.num_key_value_heads, config.head_dim
        self.block_size, self.dtype, self.device = block_size, dtype, torch.device(device)
        self.manager = BlockManager(num_blocks)
        slots = num_blocks * block_size
        self.zero_slot = slots  # one extra slot, always zero: what padded positions gather
        shape = (slots + 1, self.kv_heads, self.head_dim)  # (token slots + 1, KV, d)
        self.k_pool = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.num_layers)]
        self.v_pool = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.num_layers)]
        self.tables: dict[int, BlockTable] = {}
        self.prefix_caching = prefix_caching
        self.block_hash: dict[int, int] = {}  # block -> the chained hash of the tokens it holds
        self.cached: dict[int, int] = {}  # chained hash -> block
        self.hashes: dict[int, list[int]] = {}  # seq_id -> chained hashes of its full blocks so far
        self._lookups = self._hits = self._reused = 0

    # ---- sequences
    def add(self, seq_id: int, max_len: int | None = None) -> BlockTable:
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} is already in the cache")
        self.tables[seq_id] = BlockTable(max_len=max_len)
        return self.tables[seq_id]

    def fork(self, parent: int, child: int) -> BlockTable:
        """A new sequence sharing every block (and the length) of `parent`."""
        src = self.tables[parent]
        table = self.add(child, src.max_len)
        for block in src.blocks:
            self.manager.incref(block)
        table.blocks, table.length = list(src.blocks), src.length
        return table

    def free(self, seq_id: int) -> None:
        """Forget a sequence; its blocks go back to the pool once no other sequence shares them."""
        self.hashes.pop(seq_id, None)
        for block in self.tables.pop(seq_id).blocks:
            self.manager.release(block)

    # ---- prefix caching
    def _allocate(self) -> int:
        """A free block (the least recently freed); a cached one loses its hash (evicted)."""
        block = self.manager.allocate()
        h = self.block_hash.pop(block, None)
        if h is not None and self.cached.get(h) == block:
            del self.cached[h]
        return block

    def match_prefix(self, seq_id: int, tokens: Sequence[int]) -> int:
        """Give an empty sequence the cached blocks of its longest cached prefix (whole blocks, at least one
        token left to compute); the positions it holds now."""
        table = self.tables[seq_id]
        if not self.prefix_caching or table.length or table.blocks:
            return table.length
        B, parent, chain = self.block_size, 0, []
        for i in range((len(tokens) - 1) // B):
            h = hash((parent, tuple(tokens[i * B:(i + 1) * B])))
            self._lookups += 1
            block = self.cached.get(h)
            if block is None:
                break
            if self.manager.ref_counts[block] == 0:  # free but cached: take it off the free list
                self.manager.free_ids.remove(block)
                self.manager.ref_counts[block] = 1
            else:
                self.manager.incref(block)
            self._hits += 1
            table.blocks.append(block)
            chain.append(h)
            parent = h
        self.hashes[seq_id] = chain
        table.length = len(chain) * B
        self._reused += table.length
        return table.length

    def commit_tokens(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Register the sequence's full blocks not registered yet (`tokens`: its committed tokens)."""
        if not self.prefix_caching:
            return
        table, B = self.tables[seq_id], self.block_size
        chain = self.hashes.setdefault(seq_id, [])
        for i in range(len(chain), min(len(tokens), table.length) // B):
            h = hash((chain[-1] if chain else 0, tuple(tokens[i * B:(i + 1) * B])))
            chain.append(h)
            block = table.blocks[i]
            if h not in self.cached and block not in self.block_hash:
                self.cached[h], self.block_hash[block] = block, h

    def prefix_stats(self) -> PrefixStats:
        shared = sum(1 for r in self.manager.ref_counts if r > 1)
        return PrefixStats(self._lookups, self._hits, self._reused, shared)

    def blocks_needed(self, seq_id: int, n: int) -> int:
        """Free blocks `reserve(seq_id, n)` would take: new blocks past the table plus shared blocks to copy."""
        table = self.tables[seq_id]
        if n <= 0:
            return 0
        first, last = table.length // self.block_size, (table.length + n - 1) // self.block_size
        new = max(0, last + 1 - len(table.blocks))
        shared = sum(1 for i in range(first, min(last + 1, len(table.blocks)))
                     if self.manager.ref_counts[table.blocks[i]] > 1)
        return new + shared

    def reserve(self, seq_id: int, n: int) -> None:
        """Make positions length..length+n-1 writable by this sequence alone (all or nothing)."""
        needed = self.blocks_needed(seq_id, n)
        if needed > self.manager.num_free:
            raise OutOfBlocks(f"sequence {seq_id} needs {needed} more blocks; {self.manager.num_free} are free")
        if needed == 0:
            return
        table = self.tables[seq_id]
        first, last = table.length // self.block_size, (table.length + n - 1) // self.block_size
        for i in range(first, min(last + 1, len(table.blocks))):
            old = table.blocks[i]
            if self.manager.ref_counts[old] > 1:  # copy on write: the other sharers keep the original
                new = self._allocate()
                self._copy_block(old, new)
                self.manager.release(old)
                table.blocks[i] = new
        while len(table.blocks) <= last:
            table.blocks.append(self._allocate())

    def _copy_block(self, src: int, dst: int) -> None:
        B = self.block_size
        for pool in (*self.k_pool, *self.v_pool):
            pool[dst * B:(dst + 1) * B] = pool[src * B:(src + 1) * B]

    def slots(self, seq_id: int, start: int, end: int) -> torch.Tensor:
        """Pool slot of each position start..end-1 of a sequence, (end - start,) long."""
        table, B = self.tables[seq_id], self.block_size
        pos = torch.arange(start, end)
        blocks = torch.tensor(table.blocks, dtype=torch.long)[pos // B] if end > start else pos
        return blocks * B + pos % B

    def batch(self, seq_ids: Sequence[int]) -> "PagedBatch":
        return PagedBatch(self, list(seq_ids))

    # ---- memory
    @property
    def bytes_per_position(self) -> int:
        """K and V of one token position, every layer (`kv_bytes`)."""
        return kv_bytes(self.config, 1, torch.empty((), dtype=self.dtype).element_size())

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_position

    @property
    def pool_nbytes(self) -> int:
        """The storage allocated for the pool (every block, plus the zero slot)."""
        return sum(t.nbytes for t in (*self.k_pool, *self.v_pool))

    def reserved_contiguous_bytes(self) -> int:
        """Contiguous caches, one per live sequence, reserved to its max length (its length when unknown)."""
        return sum((t.max_len if t.max_len is not None else t.length) * self.bytes_per_position
                   for t in self.tables.values())

    def usage(self) -> CacheUsage:
        m = self.manager
        return CacheUsage(m.num_blocks, m.num_used, sum(t.length for t in self.tables.values()),
                          m.num_used * self.bytes_per_block, self.reserved_contiguous_bytes(), self.bytes_per_block)


class PagedBatch:
    """Rows = sequences of a `PagedKVCache`; the KVCache interface the model writes and reads through."""

    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        self.cache, self.seq_ids = cache, seq_ids
        self.batch = len(seq_ids)
        self._plan: tuple[list[torch.Tensor], torch.Tensor] | None = None  # per forward: write slots, read index

    @property
    def lengths(self) -> list[int]:
        return [self.cache.tables[s].length for s in self.seq_ids]

    def _forward_plan(self, counts: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Write slots of each row's new positions and the (B, S) read index, built once per forward."""
        c = self.cache
        for s, n in zip(self.seq_ids, counts):
            c.reserve(s, n)  # a no-op when the scheduler reserved already
        ends = [n0 + n for n0, n in zip(self.lengths, counts)]
        S = max(ends)
        writes = [c.slots(s, n0, n0 + n) for s, n0, n in zip(self.seq_ids, self.lengths, counts)]
        index = torch.full((self.batch, S), c.zero_slot, dtype=torch.long)  # (B, S): padded past a row's end
        for b, (s, end) in enumerate(zip(self.seq_ids, ends)):
            index[b, :end] = c.slots(s, 0, end)
        return writes, index.to(c.device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               counts: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write row b's first counts[b] new keys/values (k, v: (B, KV, T, d)) into its blocks; return every
        row's positions 0..S-1 as K, V (B, KV, S, d), S = the longest row's end."""
        B, _, T, _ = k.shape
        if B != self.batch:
            raise ValueError(f"a forward of {B} rows on a paged batch of {self.batch}")
        if self._plan is None:
            self._plan = self._forward_plan([T] * B if counts is None else list(counts))
        writes, index = self._plan
        kp, vp = self.cache.k_pool[layer], self.cache.v_pool[layer]
        for b, slots in enumerate(writes):
            n = len(slots)
            kp[slots] = k[b, :, :n].transpose(0, 1)  # (n, KV, d)
            vp[slots] = v[b, :, :n].transpose(0, 1)
        # (B, S, KV, d) gathered -> (B, KV, S, d)
        return kp[index].transpose(1, 2), vp[index].transpose(1, 2)

    def evicted_mask(self, layer: int, end: int) -> None:
        """Nothing is evicted from a paged cache (its blocks are freed whole)."""
        return None

    def advance(self, counts: int | Sequence[int]) -> None:
        """Commit the positions the forward wrote (n for every row, or counts[b] for row b)."""
        counts = [counts] * self.batch if isinstance(counts, int) else list(counts)
        if len(counts) != self.batch:
            raise ValueError(f"advance got {len(counts)} counts for {self.batch} rows")
        for s, n in zip(self.seq_ids, counts):
            table = self.cache.tables[s]
            if self.cache.blocks_needed(s, n) and n > 0:
                raise ValueError(f"sequence {s} has no blocks for {n} more positions")
            table.length += n
        self._plan = None

    def read(self, layer: int, row: int = 0, end: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Committed keys and values of one row, positions 0..end-1, each (KV, end, d) (copies)."""
        s = self.seq_ids[row]
        n = self.cache.tables[s].length
        end = n if end is None else end
        if not 0 <= end <= n:
            raise ValueError(f"row {row} holds {n} positions; cannot read up to {end}")
        slots = self.cache.slots(s, 0, end)
        return self.cache.k_pool[layer][slots].transpose(0, 1), self.cache.v_pool[layer][slots].transpose(0, 1)
