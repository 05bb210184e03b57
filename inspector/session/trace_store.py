"""The trace of one generation: one `Forward` per forward pass and the KV cache they wrote, kept in step.

A `Forward` holds everything its forward keeps: the numpy `ForwardRecord` the views read, and privately
the fp32 logits (re-sampling draws exactly what a step would), the post-RoPE queries and the last
position's residual after each layer (the logit lens input). Step k of a generation is `forwards[k]`.
No T x T attention map is ever stored: `attention_pattern/row/overview` compute weights on demand from a
forward's queries and the keys read from the cache (`inspector.session.analysis`).

Invariant: the cache holds exactly the positions the committed forwards wrote, plus those of the
`pending` forward (one run ahead of the next step, not yet committed) when there is one. `truncate` and
`drop_pending` rewind the cache with the forwards. The store knows no sampling and no text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from inspector.engine import steps
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.recording import NORM_POINTS
from inspector.errors import InputError
from inspector.session import analysis
from inspector.session.records import ForwardRecord, KVLayerStat, TopToken, lens_commitment


@dataclass
class Forward:
    """One forward pass: its record and the tensors kept for sampling and on-demand analyses."""

    record: ForwardRecord
    logits: torch.Tensor  # (V,) fp32, the last position's
    queries: torch.Tensor | None  # (layers, H, n_new, d) post-RoPE; None when nothing was recorded
    lens_inputs: torch.Tensor | None  # (layers, D) the last position's resid_post; None when nothing was recorded
    logits_raw: torch.Tensor | None = None  # (V,) fp32 before the final soft-cap, in a family that has one

    # counted once: a forward's tensors and arrays are fixed when it is made, and the memory cap reads every
    # forward's count before every decode step
    @cached_property
    def nbytes(self) -> int:
        """Bytes of the tensors kept and of the record's arrays (fp16 logits, norms)."""
        tensors = [t for t in (self.logits, self.queries, self.lens_inputs, self.logits_raw) if t is not None]
        arrays = [self.record.logits] + [getattr(self.record, p) for p in NORM_POINTS]
        return sum(t.numel() * t.element_size() for t in tensors) + sum(a.nbytes for a in arrays)


class TraceStore:
    """The forwards of one generation and its KV cache, with the analyses that read them."""

    def __init__(self, model: Transformer, piece: Callable[[int], str], cache: KVCache | None = None) -> None:
        self.model, self.config, self.piece = model, model.config, piece
        # the model's own kind of cache unless given; replaced wholesale when a step recomputes without it
        self.cache: KVCache = steps.new_cache(model) if cache is None else cache
        self.forwards: list[Forward] = []
        self.pending: Forward | None = None  # run ahead of the next step; its positions are in the cache
        # (forward, its last query's rows of every layer and head), computed ahead (`fill_overview`)
        self.overview_ahead: tuple[Forward, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.forwards)

    @property
    def records(self) -> list[ForwardRecord]:
        """The committed forwards' records, by step."""
        return [f.record for f in self.forwards]

    @property
    def end(self) -> int:
        """Positions the committed forwards wrote (where the next forward starts)."""
        return self.forwards[-1].record.positions.stop if self.forwards else 0

    def at(self, step: int) -> Forward:
        """The forward of `step` (negative counts from the newest); InputError when there is none."""
        if not -len(self.forwards) <= step < len(self.forwards):
            raise InputError(f"no step {step}: this generation has steps 0..{len(self.forwards) - 1}")
        return self.forwards[step]

    # ---- keeping forwards and cache in step
    def commit(self, forward: Forward) -> ForwardRecord:
        """Append a forward whose positions the cache already holds; it becomes the newest step."""
        self.forwards.append(forward)
        return forward.record

    def take_pending(self) -> Forward | None:
        """Hand over the forward run ahead (to be committed), if any."""
        forward, self.pending = self.pending, None
        return forward

    def drop_pending(self) -> None:
        """Forget the forward run ahead and rewind the cache to the committed forwards."""
        if self.pending is not None:
            self.pending = None
            self.overview_ahead = None
            self.cache.truncate(self.end)

    def truncate(self, step: int) -> None:
        """Keep steps 0..step (and their cache positions), drop every later one and any pending forward."""
        self.at(step)
        self.pending = self.overview_ahead = None
        del self.forwards[step % len(self.forwards) + 1:]
        self.cache.truncate(self.end)

    def kv_stats(self) -> list[KVLayerStat]:
        """Per layer, the cache as it is now: entries, capacity, shapes and bytes measured by the cache."""
        c, n_rep = self.cache, self.config.n_rep
        groups = [[j * n_rep + r for r in range(n_rep)] for j in range(self.config.num_key_value_heads)]
        k, v = c.read(0)  # (KV, length, d) each; every forward writes every layer, so all layers match
        k_shape, v_shape = (1, *k.shape), (1, *v.shape)  # this session's one row
        length, capacity, position_bytes = k.shape[1], c.capacity, c.bytes_per_position  # the same for every layer
        return [
            KVLayerStat(layer=layer, length=length, capacity=capacity, nbytes=c.layer_nbytes(layer),
                        k_shape=k_shape, v_shape=v_shape, kv_head_groups=[list(g) for g in groups],
                        position_bytes=position_bytes)
            for layer in range(self.config.num_hidden_layers)
        ]

    @property
    def retained_nbytes(self) -> int:
        """Bytes held beyond the model: the cache as allocated and every forward kept, a pending one too
        (what a memory cap must bound)."""
        held = self.forwards + ([self.pending] if self.pending is not None else [])
        ahead = self.overview_ahead[1].nbytes if self.overview_ahead is not None else 0
        return self.cache.allocated_nbytes + sum(f.nbytes for f in held) + ahead

    # ---- logit lens
    def logit_lens(self, step: int) -> list[list[TopToken]]:
        """The logit lens of a step (per layer, top-5), computed now unless it already was."""
        return self.fill_lens(self.at(step))

    def commitment(self, forward: Forward) -> list[int] | None:
        """A forward's [commitment layer, final top-1 id] (`lens_commitment`), found without the whole lens
        and kept in its record when not known yet (`analysis.commitment`); None when the lens inputs were
        not recorded."""
        rec = forward.record
        if lens_commitment(rec) is None and forward.lens_inputs is not None:
            rec.commitment = analysis.commitment(self.model, forward.lens_inputs, forward.logits)
        return lens_commitment(rec)

    def fill_lens(self, forward: Forward) -> list[list[TopToken]]:
        """Compute a forward's logit lens into its record once; later calls return the same list."""
        rec = forward.record
        if not rec.logit_lens:
            if forward.lens_inputs is None:
                raise InputError("the logit lens was not recorded (the session runs with record=False)")
            rec.logit_lens = analysis.logit_lens(self.model, self.piece, forward.lens_inputs, forward.logits)
        return rec.logit_lens

    # ---- attention, from a forward's queries and the cached keys (rows sum to 1, causal)
    def attention_pattern(self, step: int, layer: int, head: int) -> np.ndarray:
        """(n_new, n_keys) weights of every query of the forward at `step`; causal, rows sum to 1."""
        forward = self._attended(step, layer, head)
        rec, kv = forward.record, head // self.config.n_rep
        q = forward.queries[layer, head][None, None]  # (1, 1, n_new, d)
        k = self._keys(layer, rec.positions.stop)[kv][None, None]  # (1, 1, n_keys, d)
        return analysis.attention_probs(q, k, rec.start_pos, 1, self.config, layer)[0, 0].numpy()  # (n_new, n_keys)

    def attention_row(self, step: int, layer: int, head: int, query_index: int = -1) -> np.ndarray:
        """Weights (n_keys,) of one query position of the forward at `step` over all keys it saw."""
        forward = self._attended(step, layer, head)
        i = self._query_index(forward.record, query_index)
        pos, kv = forward.record.start_pos + i, head // self.config.n_rep
        q = forward.queries[layer, head, i][None, None, None]  # (1, 1, 1, d)
        k = self._keys(layer, pos + 1)[kv][None, None]  # (1, 1, n_keys, d)
        return analysis.attention_probs(q, k, pos, 1, self.config, layer)[0, 0, 0].numpy()  # (n_keys,)

    def attention_overview(self, step: int, query_index: int = -1) -> np.ndarray:
        """(num_layers, num_heads, n_keys) rows of one query position, every layer and head: the rows computed
        ahead when they are this forward's last query's and no forward has run since, else computed now."""
        forward = self._attended(step, 0, 0)
        i = self._query_index(forward.record, query_index)
        ahead = self.overview_ahead
        if ahead is not None and ahead[0] is forward and i == forward.record.n_new - 1 and self.pending is None:
            return ahead[1]
        return self._overview_rows(forward, i)

    def fill_overview(self, forward: Forward) -> None:
        """Compute the overview of `forward`'s last query now (the forward run ahead, for a view that shows it)
        and keep it, replacing any kept before: the step that commits `forward` then draws it without waiting."""
        if self.overview_ahead is not None and self.overview_ahead[0] is forward:
            return  # kept already
        self.overview_ahead = None
        if forward.queries is not None:
            self.overview_ahead = (forward, self._overview_rows(forward, forward.record.n_new - 1))

    def _overview_rows(self, forward: Forward, i: int) -> np.ndarray:
        pos = forward.record.start_pos + i
        rows = []
        for layer in range(self.config.num_hidden_layers):  # one layer at a time: no stacked copy of every key
            q = forward.queries[layer, :, i][None, :, None]  # (1, H, 1, d)
            k = self._keys(layer, pos + 1)[None]  # (1, KV, n_keys, d)
            rows.append(analysis.attention_probs(q, k, pos, self.config.n_rep, self.config, layer)[0, :, 0])  # (H, n_keys)
        return torch.stack(rows).numpy()  # (layers, H, n_keys)

    def _attended(self, step: int, layer: int, head: int) -> Forward:
        """The forward of `step`, checked to have queries and to have this layer and head."""
        cfg = self.config
        if not 0 <= head < cfg.num_attention_heads:
            raise InputError(f"no head {head}: the model has heads 0..{cfg.num_attention_heads - 1}")
        forward = self.at(step)
        if forward.queries is None:
            raise InputError("attention was not recorded (the session runs with record=False)")
        if not 0 <= layer < cfg.num_hidden_layers:
            raise InputError(f"no layer {layer}: the model has layers 0..{cfg.num_hidden_layers - 1}")
        return forward

    @staticmethod
    def _query_index(rec: ForwardRecord, query_index: int) -> int:
        if not -rec.n_new <= query_index < rec.n_new:
            raise InputError(f"no query {query_index}: step {rec.step} added {rec.n_new} positions")
        return query_index % rec.n_new

    def _keys(self, layer: int, end: int) -> torch.Tensor:
        """Cached keys of positions 0..end-1 of one layer, (KV, end, d)."""
        keys, _ = self.cache.read(layer, end=end)
        return keys.cpu()  # the views compute on the CPU (a no-op for a CPU cache)
