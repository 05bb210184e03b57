"""A generation session over one loaded model: prefill, step, play, branch, resample.

The session owns the KV cache (the model never does) and the list of `ForwardRecord`s, one per forward:
records[0] is the prefill, records[k] the k-th decode step, and records[k].sample drew generated_ids[k].
It knows the tokenizer (chat template, incremental detokenization); the model knows nothing about text.
Besides the small numpy records it keeps, privately, each forward's fp32 logits (so re-sampling draws
exactly what a step would) and post-RoPE queries (so attention rows are computed on demand from them
and the cached keys; no T x T map is ever stored).

Seed rule: the token at position p is drawn with `generator_for(params.seed, p)`, so `preview_sample`
with the same params predicts exactly what `step` or `resample` picks.

Run-ahead: a decode step's forward only feeds the last sampled token, which is known as soon as it is
drawn, and its logits do not depend on the sampling settings. `forward_ahead()` runs that forward early
(while a person looks at the last token) and keeps it pending, outside `records`; the next `step()`
commits it and only samples. The pending forward has written one position past the committed end of the
cache; everything that changes the last token (resample, branch, a new prefill) drops it and rewinds
the cache, so what a session shows and returns is the same with or without running ahead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from inspector.engine import steps as engine
from inspector.engine.config import SamplingParams
from inspector.models.detokenize import Detokenizer
from inspector.errors import InputError
from inspector.models.loader import LoadedModel
from inspector.engine.recording import NORM_POINTS, SummaryRecorder
from inspector.session.records import ForwardRecord, KVLayerStat, SampleRecord, TopToken
from inspector.engine.sampling import generator_for, sample, sample_record

LENS_TOP = 5


def _check(params: SamplingParams) -> None:
    try:
        params.validate()
    except ValueError as exc:
        raise InputError(str(exc)) from None


@dataclass
class _Forward:
    """One forward's record and the private tensors kept beside it."""

    record: ForwardRecord
    logits: torch.Tensor  # (V,) fp32
    queries: torch.Tensor | None  # (layers, H, n_new, d)
    lens_inputs: torch.Tensor | None  # (layers, D)


class Session:
    def __init__(self, loaded: LoadedModel, *, recompute: bool = False, record: bool = True,
                 lens: bool = True) -> None:
        self.loaded = loaded
        self.recompute = recompute  # True: every decode step runs the full sequence without the cache
        self.record = record  # False: no recorder in the model (zero cost); norms, lens and attention empty
        # False: record.logit_lens stays [] until `logit_lens(step)` fills it (the lens costs one
        # (layers x vocab) matmul, about a third of a decode step on a small model).
        self.lens = lens
        self.model, self.config, self.tokenizer = loaded.model, loaded.config, loaded.tokenizer
        self.context = self.config.max_position_embeddings
        eos = set(self.config.eos_token_ids)
        if getattr(self.tokenizer, "eos_id", None) is not None:
            eos.add(self.tokenizer.eos_id)
        self.eos_ids = frozenset(eos)
        self.max_new_tokens = 64
        self._reset()

    def _reset(self) -> None:
        self.cache = engine.new_cache(self.model)
        self.records: list[ForwardRecord] = []
        self.prompt_ids: list[int] = []
        self.generated_ids: list[int] = []  # sampled tokens (the last one is not in the cache yet)
        self.text: str = ""  # generated text, grown by incremental detokenization
        self.finished: str | None = None  # None | "eos" | "max_tokens" | "context_full"
        self._logits: list[torch.Tensor] = []  # per record, (V,) fp32
        self._queries: list[torch.Tensor | None] = []  # per record, (layers, H, n_new, d)
        self._lens_inputs: list[torch.Tensor | None] = []  # per record, (layers, D): last position's resid_post
        self._ahead: _Forward | None = None  # the next decode forward, run early (see forward_ahead)
        self._detok = Detokenizer(self.tokenizer)

    # ---- generation
    def prefill(self, prompt: str, params: SamplingParams, *, chat: bool = False,
                system: str | None = None, max_new_tokens: int = 64) -> ForwardRecord:
        """Tokenize (chat template optional), run one forward over all prompt tokens, sample token 1.

        Raises InputError on an empty prompt or one that leaves no room in the context window."""
        if not prompt or not prompt.strip():
            raise InputError("prompt is empty")
        t0 = time.perf_counter()
        text = self.tokenizer.render_chat(prompt, system=system) if chat else prompt
        ids = self.tokenizer.encode(text)
        tokenize_ms = (time.perf_counter() - t0) * 1e3
        return self.prefill_ids(ids, params, max_new_tokens=max_new_tokens, tokenize_ms=tokenize_ms)

    def prefill_ids(self, ids: list[int], params: SamplingParams, *, max_new_tokens: int = 64,
                    tokenize_ms: float = 0.0) -> ForwardRecord:
        """`prefill` from token ids (already tokenized); starts a new generation."""
        _check(params)
        if max_new_tokens <= 0:
            raise InputError(f"max new tokens must be > 0, got {max_new_tokens}")
        if not ids:
            raise InputError("prompt is empty")
        if len(ids) >= self.context:
            raise InputError(f"prompt is {len(ids)} tokens; the context window is {self.context} tokens")
        bad = [i for i in ids if not 0 <= i < self.config.vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary ({self.config.vocab_size})")
        self._reset()
        self.max_new_tokens = max_new_tokens
        self.prompt_ids = list(ids)
        rec = self._commit(self._forward("prefill", list(ids), cached=True))
        rec.tokenize_ms = tokenize_ms
        self._sample_into(0, params)
        return rec

    def step(self, params: SamplingParams) -> ForwardRecord:
        """Feed the last sampled token (one forward of one token), sample the next. InputError if finished
        or not prefilled."""
        _check(params)
        if not self.records:
            raise InputError("nothing to continue: run prefill first")
        if self.finished:
            raise InputError(f"generation has finished ({self.finished}); branch, resample or prefill again")
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            ahead = self._forward("decode", [self.generated_ids[-1]], cached=not self.recompute)
        rec = self._commit(ahead)
        self._sample_into(len(self.records) - 1, params)
        return rec

    def forward_ahead(self, lens: bool = False) -> bool:
        """Run the next step's forward now and keep it for `step()` (see the module docstring); `lens=True`
        computes its logit lens too (also for a forward already pending). True when a forward is pending
        afterwards; False when there is nothing to run: not prefilled, finished, or a recompute session."""
        if self._ahead is None:
            if not self.records or self.finished or self.recompute:
                return False
            self._ahead = self._forward("decode", [self.generated_ids[-1]], cached=True)
        ahead = self._ahead
        if lens and ahead.lens_inputs is not None and not ahead.record.logit_lens:
            ahead.record.logit_lens = self._logit_lens(ahead.lens_inputs, ahead.logits)
        return True

    @property
    def is_ahead(self) -> bool:
        """True while a forward run by `forward_ahead()` waits for the next `step()`."""
        return self._ahead is not None

    def _drop_ahead(self) -> None:
        """Forget a pending forward (its token is about to change) and rewind the cache to the records."""
        if self._ahead is not None:
            self._ahead = None
            self.cache.truncate(self.records[-1].positions.stop)  # the positions the records committed

    def play(self, params: SamplingParams) -> Iterator[ForwardRecord]:
        """Step until EOS, max_new_tokens or the context end (sets `finished`)."""
        while not self.finished:
            yield self.step(params)

    def branch(self, step: int, token_id: int) -> None:
        """Force `token_id` as the token sampled at `step` (0 = the prefill's sample), drop what followed
        (truncating the KV cache), and continue from there."""
        self._record_at(step)
        self._drop_ahead()
        step = step % len(self.records)
        if not 0 <= token_id < self.config.vocab_size:
            raise InputError(f"token id {token_id} is outside the vocabulary ({self.config.vocab_size})")
        del self.records[step + 1:], self._logits[step + 1:], self._queries[step + 1:], self._lens_inputs[step + 1:]
        rec = self.records[step]
        self.cache.truncate(rec.start_pos + rec.n_new)
        self._sample_into(step, rec.sample.params, force=token_id)
        rec.extra["forced"] = True

    def preview_sample(self, params: SamplingParams, step: int | None = None) -> SampleRecord:
        """Re-run sampling (no model) on a step's stored logits with other params; same seed rule as step."""
        _check(params)
        index = len(self.records) - 1 if step is None else step
        rec = self._record_at(index)
        logits = self._logits[index]
        result = sample(logits, params, generator_for(params.seed, rec.start_pos + rec.n_new))
        return sample_record(result, logits, params, self.tokenizer.piece)

    def resample(self, params: SamplingParams) -> ForwardRecord:
        """Re-draw the newest step's token from its stored logits with `params` (no model rerun)."""
        _check(params)
        if not self.records:
            raise InputError("nothing to resample: run prefill first")
        self._drop_ahead()
        self._sample_into(len(self.records) - 1, params)
        self.records[-1].extra.pop("forced", None)
        return self.records[-1]

    def recompute_last_step(self) -> tuple[float, float]:
        """Run the newest forward again over the full sequence without the cache: (max |logit diff|, ms)."""
        if not self.records:
            raise InputError("nothing to recompute: run prefill first")
        k = len(self.records) - 1
        ids = self.prompt_ids + self.generated_ids[:k]
        t0 = time.perf_counter()
        logits, _ = engine.recompute_step(self.model, ids)
        ms = (time.perf_counter() - t0) * 1e3
        return float((logits - self._logits[k]).abs().max()), ms

    # ---- timings
    @property
    def ttft_ms(self) -> float:
        """Time to first token: tokenize + prefill forward + first sample."""
        r = self._record_at(0)
        return r.tokenize_ms + r.forward_ms + r.sample_ms

    @property
    def tpot_ms(self) -> list[float]:
        """Per decode step: forward + sample."""
        return [r.forward_ms + r.sample_ms for r in self.records[1:]]

    @property
    def retained_nbytes(self) -> int:
        """Bytes this session holds beyond the model: the KV cache as allocated, the private fp32 logits,
        queries and lens inputs (a pending forward's too), and the records' fp16 logits and norms (what a
        memory cap must bound)."""
        groups = [self._logits, self._queries, self._lens_inputs]
        if self._ahead is not None:
            groups.append([self._ahead.logits, self._ahead.queries, self._ahead.lens_inputs])
        private = [t for group in groups for t in group if t is not None]
        records = sum(r.logits.nbytes + sum(getattr(r, p).nbytes for p in NORM_POINTS) for r in self.records)
        return self.cache.allocated_nbytes + sum(t.numel() * t.element_size() for t in private) + records

    # ---- internals
    def _record_at(self, step: int) -> ForwardRecord:
        if not -len(self.records) <= step < len(self.records):
            raise InputError(f"no step {step}: this generation has steps 0..{len(self.records) - 1}")
        return self.records[step]

    def _forward(self, kind: str, token_ids: list[int], cached: bool) -> _Forward:
        """Run one forward (cached, or the full sequence when not): its record, logits and queries."""
        start = self.cache.length
        L = self.config.num_hidden_layers
        rec = SummaryRecorder(L, keep=None if cached else len(token_ids)) if self.record else None
        t0 = time.perf_counter()
        if kind == "prefill":
            logits = engine.prefill(self.model, token_ids, self.cache, rec)
        elif cached:
            logits = engine.decode_step(self.model, token_ids[0], self.cache, rec)
        else:
            logits, self.cache = engine.recompute_step(self.model, self.prompt_ids + self.generated_ids, rec)
        forward_ms = (time.perf_counter() - t0) * 1e3
        t1 = time.perf_counter()
        if rec is not None:
            norms, queries, lens_inputs = rec.norm_arrays(), rec.queries(), rec.lens_inputs()
            lens = self._logit_lens(lens_inputs, logits) if self.lens else []
        else:
            norms = {p: np.zeros((L, 0), np.float32) for p in NORM_POINTS}
            lens, queries, lens_inputs = [], None, None
        record = ForwardRecord(
            kind=kind, step=len(self.records), start_pos=start, token_ids=list(token_ids), cached=cached,
            **norms, logit_lens=lens, logits=logits.numpy().astype(np.float16), kv=self._kv_stats(),
            forward_ms=forward_ms,
        )
        record.extra["record_ms"] = (time.perf_counter() - t1) * 1e3
        return _Forward(record, logits, queries, lens_inputs)

    def _commit(self, forward: _Forward) -> ForwardRecord:
        """Append a forward to the records."""
        self.records.append(forward.record)
        self._logits.append(forward.logits)
        self._queries.append(forward.queries)
        self._lens_inputs.append(forward.lens_inputs)
        return forward.record

    def logit_lens(self, step: int) -> list[list[TopToken]]:
        """The logit lens of a step (per layer, top-5), computed now if the session was made with lens=False."""
        record = self._record_at(step)
        if not record.logit_lens:
            inputs = self._lens_inputs[step]
            if inputs is None:
                raise InputError("the logit lens was not recorded (the session runs with record=False)")
            record.logit_lens = self._logit_lens(inputs, self._logits[step])
        return record.logit_lens

    @torch.inference_mode()
    def _logit_lens(self, resid: torch.Tensor, logits: torch.Tensor) -> list[list[TopToken]]:
        """Top-5 of final norm + LM head on each layer's last residual; the last layer reuses the real logits."""
        lens_logits = torch.cat([self.model.unembed(resid[:-1]).float(), logits[None]])  # (layers, V)
        top = torch.topk(lens_logits, LENS_TOP, dim=-1)  # (layers, 5)
        probs = (top.values - torch.logsumexp(lens_logits, dim=-1, keepdim=True)).exp()  # softmax of the top 5
        piece = self.tokenizer.piece
        return [
            [TopToken(i, piece(i), v, p) for i, v, p in zip(ids, vals, ps)]
            for ids, vals, ps in zip(top.indices.tolist(), top.values.tolist(), probs.tolist())
        ]

    def _kv_stats(self) -> list[KVLayerStat]:
        c, n_rep = self.cache, self.config.n_rep
        groups = [[j * n_rep + r for r in range(n_rep)] for j in range(c.kv_heads)]
        shape = (c.batch, c.kv_heads, c.length, c.head_dim)
        return [
            KVLayerStat(layer=i, length=c.length, capacity=0 if c.keys[i] is None else c.keys[i].shape[2],
                        nbytes=c.layer_nbytes, k_shape=shape, v_shape=shape,
                        kv_head_groups=[list(g) for g in groups])
            for i in range(c.num_layers)
        ]

    def _sample_into(self, index: int, params: SamplingParams, force: int | None = None) -> None:
        """Draw (or force) the token of record `index`; it becomes generated_ids[index]; update text/finished."""
        rec, logits = self.records[index], self._logits[index]
        t0 = time.perf_counter()
        result = sample(logits, params, generator_for(params.seed, rec.start_pos + rec.n_new), force_token=force)
        rec.sample_ms = (time.perf_counter() - t0) * 1e3
        rec.sample = sample_record(result, logits, params, self.tokenizer.piece)
        appended = index == len(self.generated_ids)
        self.generated_ids[index:] = [result.token]
        if appended and not self.finished:
            self._detok.add(result.token)
        else:  # a replaced token: rebuild the text from scratch
            self._detok = Detokenizer(self.tokenizer)
            for t in self.generated_ids:
                self._detok.add(t)
        self.finished = self._finish_reason(result.token)
        if self.finished:
            self._detok.finish()
        self.text = self._detok.text

    def _finish_reason(self, token: int) -> str | None:
        if token in self.eos_ids:
            return "eos"
        if len(self.generated_ids) >= self.max_new_tokens:
            return "max_tokens"
        if len(self.prompt_ids) + len(self.generated_ids) >= self.context:
            return "context_full"
        return None

    # ---- attention, computed on demand from stored queries and cached keys (rows sum to 1, causal)
    def _qk(self, step: int, layer: int) -> tuple[ForwardRecord, torch.Tensor, torch.Tensor]:
        """(record, queries (H, n_new, d) fp32, keys (H, n_keys, d) fp32) of one layer at one step."""
        rec = self._record_at(step)
        queries = self._queries[step]
        if queries is None:
            raise InputError("attention was not recorded (the session runs with record=False)")
        if not 0 <= layer < self.config.num_hidden_layers:
            raise InputError(f"no layer {layer}: the model has layers 0..{self.config.num_hidden_layers - 1}")
        end = rec.start_pos + rec.n_new
        keys = self.cache.keys[layer][0, :, :end].float()  # (KV, n_keys, d)
        keys = keys.repeat_interleave(self.config.n_rep, dim=0)  # (H, n_keys, d)
        return rec, queries[layer].float(), keys

    def _query_pos(self, rec: ForwardRecord, query_index: int) -> int:
        if not -rec.n_new <= query_index < rec.n_new:
            raise InputError(f"no query {query_index}: step {rec.step} added {rec.n_new} positions")
        return query_index % rec.n_new

    def _head(self, head: int) -> None:
        if not 0 <= head < self.config.num_attention_heads:
            raise InputError(f"no head {head}: the model has heads 0..{self.config.num_attention_heads - 1}")

    @torch.inference_mode()
    def attention_row(self, step: int, layer: int, head: int, query_index: int = -1) -> np.ndarray:
        """Weights (n_keys,) of one query position of the forward at `step` over all keys it saw."""
        self._head(head)
        rec, q, k = self._qk(step, layer)
        i = self._query_pos(rec, query_index)
        n_keys = rec.start_pos + i + 1
        scores = k[head, :n_keys] @ q[head, i] / math.sqrt(q.shape[-1])  # (n_keys,)
        return torch.softmax(scores, dim=-1).numpy()

    @torch.inference_mode()
    def attention_pattern(self, step: int, layer: int, head: int) -> np.ndarray:
        """(n_new, n_keys) weights of every query of the forward at `step`; causal, rows sum to 1."""
        self._head(head)
        rec, q, k = self._qk(step, layer)
        scores = q[head] @ k[head].T / math.sqrt(q.shape[-1])  # (n_new, n_keys)
        causal = torch.ones_like(scores, dtype=torch.bool).tril(diagonal=rec.start_pos)
        return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1).numpy()

    @torch.inference_mode()
    def attention_overview(self, step: int, query_index: int = -1) -> np.ndarray:
        """(num_layers, num_heads, n_keys) rows of one query position, every layer and head."""
        rows = []
        for layer in range(self.config.num_hidden_layers):
            rec, q, k = self._qk(step, layer)
            i = self._query_pos(rec, query_index)
            n_keys = rec.start_pos + i + 1
            scores = torch.einsum("hsd,hd->hs", k[:, :n_keys], q[:, i]) / math.sqrt(q.shape[-1])  # (H, n_keys)
            rows.append(torch.softmax(scores, dim=-1))
        return torch.stack(rows).numpy()  # (layers, H, n_keys)

    def token_pieces(self) -> list[str]:
        """Display pieces of prompt + generated tokens, by position."""
        return self.tokenizer.pieces(self.prompt_ids + self.generated_ids)
