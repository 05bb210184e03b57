"""A generation session over one loaded model: prefill, step, play, branch, resample.

The session is the generation state machine: what was prompted and sampled, the detokenized text and
why generation finished. Everything a forward keeps, and the KV cache (the model never owns it), lives in
its `TraceStore` (`session.trace`, one `Forward` per forward): records[0] is the prefill, records[k] the
k-th decode step, and records[k].sample drew generated_ids[k]. The attention and logit-lens views are
the store's, reachable here by the same names. The session knows the tokenizer (chat template,
incremental detokenization); the model knows nothing about text.

Seed rule: the token at position p is drawn with `generator_for(params.seed, p)`, so `preview_sample`
with the same params predicts exactly what `step` or `resample` picks.

Context overflow (`on_context_full`): "stop" (default) ends the generation with finish reason
"context_full" when prompt + generated tokens fill the model's context window. "window" goes on past it
with a sliding window over the cache: the first `OVERFLOW_SINKS` positions (attention sinks) and the
newest ones, so every forward attends to at most a context's worth of positions. Kept keys keep their
original positions (the masking convention of `inspector.generation.cache_policies`): positions count on
past the trained window, as the text does. A cache policy the levers already hold stays in charge.

Run-ahead: a decode step's forward only feeds the last sampled token, which is known as soon as it is drawn, and its
logits do not depend on the sampling settings. `forward_ahead()` runs that forward early (while a person looks at
the last token) and keeps it as the store's `pending` forward, outside `records`; the next `step()` commits it and
only samples. Everything that changes the last token (resample, branch, a new prefill) drops it and rewinds the
cache, so what a session shows and returns is the same with or without running ahead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from inspector.engine import steps as engine
from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.recording import NORM_POINTS, SummaryRecorder
from inspector.engine.sampling import generator_for, sample
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.cache_policies import KeepAll, SlidingWindow
from inspector.generation.decoding import decoding_processors
from inspector.generation.levers import Levers, check_interventions
from inspector.generation.settings import DecodingSettings
from inspector.generation.sequence import Sequence, SequenceOwner
from inspector.models.loader import LoadedModel
from inspector.session.records import ForwardRecord, RoutingRecord, SampleRecord, TopToken
from inspector.session.sample_records import sample_record
from inspector.session.trace_store import Forward, TraceStore


OVERFLOW = ("stop", "window")
OVERFLOW_SINKS = 4  # sink positions the overflow window keeps


class Session(SequenceOwner):
    """Prefill, step, branch and resample one generation; its forwards and KV cache are in `self.trace`."""

    def __init__(self, loaded: LoadedModel, *, recompute: bool = False, record: bool = True,
                 lens: bool = False, levers: Levers = loop.NO_LEVERS,
                 restored: tuple[TraceStore, Sequence] | None = None, on_context_full: str = "stop") -> None:
        """A new generation over `loaded`; `restored` (a trace store and its sequence, read from a trace
        file) starts it where a saved one stood instead of empty; `on_context_full` "stop" | "window"
        (see the module docstring)."""
        if on_context_full not in OVERFLOW:
            raise InputError(f"on context full must be one of {', '.join(OVERFLOW)}, got {on_context_full!r}")
        self.on_context_full = on_context_full
        self.loaded = loaded
        self.recompute = recompute  # True: every decode step runs the full sequence without the cache
        self.record = record  # False: no recorder in the model (zero cost); norms, lens and attention empty
        # False (the default, the doors'): record.logit_lens stays [] until `logit_lens(step)` fills it; True: every
        # forward computes it, a (layers x vocab) matmul per forward, about a whole decode step on the default model.
        self.lens = lens
        self.model, self.config, self.tokenizer = loaded.model, loaded.config, loaded.tokenizer
        self.context = self.config.max_position_embeddings
        self.eos_ids = loaded.stop_ids
        self.max_new_tokens = 64
        if levers.interventions:  # (the check reads every trace point's name: skipped when there are none)
            check_interventions(levers.interventions, self.config)
        self.levers = levers  # processors, KV-cache policy, interventions: applied to every forward and draw
        # penalties, bans, stop strings and a grammar constraint: their processors run before the levers'
        self.decoding = DecodingSettings()
        self._decoding_procs: tuple = ()
        self.request: dict | None = None  # the run's description (`RunRequest.to_json()`) when its maker gives it
        self._valid: SamplingParams | None = None  # the params object last known valid (`_check`)
        if restored is None:
            self._reset()
        else:
            self.trace, self.seq = restored

    def new_cache(self) -> KVCache:
        """An empty KV cache for this session's generation (a quantized session gives its own kind)."""
        return engine.new_cache(self.model)

    def _reset(self, prompt_ids: list[int] | None = None) -> None:
        self.trace = TraceStore(self.model, self.tokenizer.piece, self.new_cache())
        # the generation's ids, text and finish reason (the newest sampled token is not in the cache yet)
        limit = self.context if self.on_context_full == "stop" else sys.maxsize  # "window": no end of context
        self.seq = Sequence(prompt_ids or [], self.max_new_tokens, limit, stop_ids=self.eos_ids,
                            tokenizer=self.tokenizer, cache=self.trace.cache, stop_strings=self.decoding.stop)
        self._decoding_procs = self._build_decoding(self.decoding)

    @property
    def levers(self) -> Levers:
        """The levers every forward and draw runs: the decoding settings' processors first, then the levers'."""
        if not self._decoding_procs:
            return self._levers
        return replace(self._levers, processors=self._decoding_procs + self._levers.processors)

    @levers.setter
    def levers(self, levers: Levers) -> None:
        self._levers = levers

    @property
    def own_levers(self) -> Levers:
        """The levers set on the session (`set_levers`), without the decoding settings' processors."""
        return self._levers

    def set_decoding(self, settings: DecodingSettings) -> None:
        """Use these decoding settings from the next draw on (a prefill keeps them for its generation)."""
        procs = self._build_decoding(settings)
        self.decoding, self._decoding_procs = settings, procs
        if hasattr(self, "seq"):
            self.seq.stop_strings = tuple(s for s in settings.stop if s)

    def _build_decoding(self, settings: DecodingSettings) -> tuple:
        if settings.num_beams > 1:
            raise InputError("beam search runs as its own search (inspector run --num-beams, the Beams view), "
                             "not step by step: use num-beams 1 here")
        if not hasattr(self, "seq") or not self.seq.prompt_ids:
            settings.validate()
            return ()
        return decoding_processors(settings, len(self.seq.prompt_ids), self.tokenizer, sorted(self.eos_ids),
                                   self.config.vocab_size)

    @property
    def records(self) -> list[ForwardRecord]:
        """One record per committed forward: 0 = the prefill, k = the k-th decode step."""
        return self.trace.records

    @property
    def cache(self) -> KVCache:
        """The KV cache of this generation (held by the trace store)."""
        return self.trace.cache

    def set_levers(self, levers: Levers) -> None:
        """Use `levers` from the next forward and draw on (InputError on an intervention point the model
        lacks). A forward already run ahead with the old levers is dropped, so the next step runs anew."""
        check_interventions(levers.interventions, self.config)
        self.trace.drop_pending()
        self.levers = levers

    # ---- generation
    def prefill(self, prompt: str, params: SamplingParams, *, chat: bool = False,
                system: str | None = None, max_new_tokens: int = 64) -> ForwardRecord:
        """Tokenize (chat template optional), run one forward over all prompt tokens, sample token 1.

        Raises InputError on an empty prompt or one that leaves no room in the context window."""
        if not prompt or not prompt.strip():
            raise InputError("prompt is empty")
        t0 = time.perf_counter()
        ids = self.tokenizer.prompt_ids(prompt, chat, system)
        tokenize_ms = (time.perf_counter() - t0) * 1e3
        return self.prefill_ids(ids, params, max_new_tokens=max_new_tokens, tokenize_ms=tokenize_ms)

    def prefill_ids(self, ids: list[int], params: SamplingParams, *, max_new_tokens: int = 64,
                    tokenize_ms: float = 0.0, checked: bool = False) -> ForwardRecord:
        """`prefill` from token ids (already tokenized); starts a new generation. Sampling params are checked once:
        by `RunRequest.check` (every door's), whose caller says `checked=True`; a direct caller's here."""
        self._check(params, checked)
        if max_new_tokens <= 0 or not ids:
            raise InputError("prompt is empty" if not ids else f"max new tokens must be > 0, got {max_new_tokens}")
        if len(ids) >= self.context:
            raise InputError(f"prompt is {len(ids)} tokens; the context window is {self.context} tokens")
        bad = [i for i in ids if not 0 <= i < self.config.vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary ({self.config.vocab_size})")
        self.max_new_tokens = max_new_tokens
        self._reset(list(ids))
        rec = self.trace.commit(self._forward("prefill", list(ids), cached=True))
        rec.tokenize_ms = tokenize_ms
        self._sample_into(0, params)
        return rec

    def step(self, params: SamplingParams) -> ForwardRecord:
        """Feed the last sampled token (one forward of one token), sample the next. InputError if finished
        or not prefilled."""
        self._check(params)
        if not self.trace.forwards:
            raise InputError("nothing to continue: run prefill first")
        if self.finished:
            raise InputError(f"generation has finished ({self.finished}); branch, resample or prefill again")
        forward = self.trace.take_pending()
        if forward is None:
            forward = self._forward("decode", [self.generated_ids[-1]], cached=not self.recompute)
        rec = self.trace.commit(forward)
        self._sample_into(len(self.trace) - 1, params)
        return rec

    def forward_ahead(self, lens: bool = False, commitment: bool = False, overview: bool = False) -> bool:
        """Run the next step's forward now, kept for `step()` (module docstring), with its logit lens (`lens`), only
        the lens's commitment layer (`commitment`), its query's `attention_overview` (`overview`), also for a pending
        forward. True when a forward is pending after; False when none can run (not prefilled, finished, recompute)."""
        if self.trace.pending is None:
            if not self.trace.forwards or self.finished or self.recompute:
                return False
            self.trace.pending = self._forward("decode", [self.generated_ids[-1]], cached=True)
        if lens and self.trace.pending.lens_inputs is not None:
            self.trace.fill_lens(self.trace.pending)
        if commitment:
            self.trace.commitment(self.trace.pending)
        if overview:
            self.trace.fill_overview(self.trace.pending)
        return True

    @property
    def is_ahead(self) -> bool:
        """True while a forward run by `forward_ahead()` waits for the next `step()`."""
        return self.trace.pending is not None

    def play(self, params: SamplingParams) -> Iterator[ForwardRecord]:
        """Step until EOS, max_new_tokens or the context end (sets `finished`)."""
        while not self.finished:
            yield self.step(params)

    def branch(self, step: int, token_id: int) -> None:
        """Force `token_id` as the token sampled at `step` (0 = the prefill's sample), drop what followed
        (truncating the KV cache), and continue from there."""
        self.trace.at(step)
        if not 0 <= token_id < self.config.vocab_size:
            raise InputError(f"token id {token_id} is outside the vocabulary ({self.config.vocab_size})")
        step = step % len(self.trace)
        self.trace.truncate(step)
        rec = self.trace.forwards[step].record
        self._sample_into(step, rec.sample.params, force=token_id)
        rec.extra["forced"] = True

    def follow(self, generated_ids: list[int]) -> None:
        """Make the run's sampled tokens `generated_ids` (another branch of it): keep the steps both share,
        force the first token where they part, then one forward per further token, each forced to the
        branch's token. Records and cache end as if the branch had been generated step by step."""
        target = list(generated_ids)
        if not self.trace.forwards:
            raise InputError("nothing to follow: run prefill first")
        if not target:
            raise InputError("a branch holds at least the prefill's token")
        shared = next((i for i, (a, b) in enumerate(zip(self.generated_ids, target)) if a != b),
                      min(len(self.generated_ids), len(target)))
        if shared < len(target) and shared < len(self.generated_ids):
            self.branch(shared, target[shared])  # they part at `shared`: rewind there, force the branch's token
        elif len(target) < len(self.generated_ids):
            self.branch(len(target) - 1, target[-1])  # the branch is a prefix of this run: rewind to its end
        while len(self.generated_ids) < len(target):
            k = len(self.generated_ids)
            if self.finished:
                raise InputError(f"the run finished ({self.finished}) before step {k} of the branch")
            self.step(self.trace.forwards[-1].record.sample.params)
            if self.generated_ids[k] != target[k]:
                self.branch(k, target[k])

    def preview_sample(self, params: SamplingParams, step: int | None = None) -> SampleRecord:
        """Re-run sampling (no model) on a step's stored logits with other params; same seed rule as step."""
        self._check(params)
        forward = self.trace.at(-1 if step is None else step)
        rec, logits = forward.record, forward.logits
        context = self.seq.ids[:rec.positions.stop]
        result = sample(logits, params, generator_for(params.seed, len(context)), ids=context,
                        processors=self.levers.processors)
        return sample_record(result, logits, params, self.tokenizer.piece, precap=self._precap(forward))

    def resample(self, params: SamplingParams) -> ForwardRecord:
        """Re-draw the newest step's token from its stored logits with `params` (no model rerun)."""
        self._check(params)
        if not self.trace.forwards:
            raise InputError("nothing to resample: run prefill first")
        self.trace.drop_pending()
        self._sample_into(len(self.trace) - 1, params)
        rec = self.trace.forwards[-1].record
        rec.extra.pop("forced", None)
        return rec

    def recompute_last_step(self) -> tuple[float, float]:
        """Run the newest forward again over the full sequence without the cache: (max |logit diff|, ms)."""
        if not self.trace.forwards:
            raise InputError("nothing to recompute: run prefill first")
        k = len(self.trace) - 1
        ids = self.prompt_ids + self.generated_ids[:k]
        t0 = time.perf_counter()
        logits = loop.forward(self.model, self.new_cache(), [ids], self._forward_levers())[0]
        ms = (time.perf_counter() - t0) * 1e3
        return float((logits - self.trace.forwards[k].logits).abs().max()), ms

    # ---- timings
    @property
    def ttft_ms(self) -> float:
        """Time to first token: tokenize + prefill forward + first sample."""
        r = self.trace.at(0).record
        return r.tokenize_ms + r.forward_ms + r.sample_ms

    @property
    def tpot_ms(self) -> list[float]:
        """Per decode step: forward + sample."""
        return [r.forward_ms + r.sample_ms for r in self.records[1:]]

    # ---- views of the trace, by step
    @property
    def retained_nbytes(self) -> int:
        """Bytes this session holds beyond the model (`TraceStore.retained_nbytes`)."""
        return self.trace.retained_nbytes

    def logit_lens(self, step: int) -> list[list[TopToken]]:
        """The logit lens of a step (per layer, top-5), computed now if the session was made with lens=False."""
        return self.trace.logit_lens(step)

    def commitment(self, step: int) -> list[int] | None:
        """[commitment layer, final top-1 id] of a step's logit lens, without the whole lens when not computed."""
        return self.trace.commitment(self.trace.at(step))

    def attention_row(self, step: int, layer: int, head: int, query_index: int = -1) -> np.ndarray:
        """Weights (n_keys,) of one query position of the forward at `step` over all keys it saw."""
        return self.trace.attention_row(step, layer, head, query_index)

    def attention_pattern(self, step: int, layer: int, head: int) -> np.ndarray:
        """(n_new, n_keys) weights of every query of the forward at `step`; causal, rows sum to 1."""
        return self.trace.attention_pattern(step, layer, head)

    def attention_overview(self, step: int, query_index: int = -1) -> np.ndarray:
        """(num_layers, num_heads, n_keys) rows of one query position, every layer and head."""
        return self.trace.attention_overview(step, query_index)

    def token_pieces(self) -> list[str]:
        """Display pieces of prompt + generated tokens, by position."""
        return self.tokenizer.pieces(self.prompt_ids + self.generated_ids)

    # ---- internals
    def _forward_levers(self) -> Levers:
        """The levers a forward runs with: the session's, with the overflow window when the session goes on
        past the context and holds no policy of its own."""
        policy = self.levers.cache_policy
        if getattr(policy, "rerotate", False):
            raise InputError("a session keeps every position's record: use the masking convention "
                             "(original positions), not re-rotated ones")
        if self.on_context_full == "window" and isinstance(policy, KeepAll):
            window = SlidingWindow(self.context - 1 - OVERFLOW_SINKS, OVERFLOW_SINKS, "overflow window")
            return Levers(self.levers.processors, window, self.levers.interventions)
        return self.levers

    def _forward(self, kind: str, token_ids: list[int], cached: bool) -> Forward:
        """Run one forward (cached, or the full sequence when not) and keep what it recorded."""
        levers, start, L = self._forward_levers(), self.trace.end, self.config.num_hidden_layers
        rec = SummaryRecorder(L, keep=None if cached else len(token_ids)) if self.record else None
        t0, kept, feed = time.perf_counter(), self.cache, token_ids
        try:
            if not (kind == "prefill" or cached):  # the whole sequence from position 0 into a fresh cache
                self.trace.cache = self.seq.cache = self.new_cache()
                feed = self.prompt_ids + self.generated_ids
            logits = loop.forward(self.model, self.cache, [feed], levers, rec, step=len(self.trace))[0]
        except BaseException:  # a hook that raised: the generation stays at its last committed step
            kept.truncate(self.trace.end)
            self.trace.cache = self.seq.cache = kept
            raise
        forward_ms = (time.perf_counter() - t0) * 1e3
        t1 = time.perf_counter()
        if rec is not None:
            norms = {**rec.norm_arrays(), **rec.post_norm_arrays(), "routing": RoutingRecord.of(rec.routing_arrays())}
            queries, lens_inputs = rec.queries(), rec.lens_inputs()
        else:
            norms = {p: np.zeros((L, 0), np.float32) for p in NORM_POINTS}
            queries, lens_inputs = None, None
        # logits kept in fp16, rounded by torch (to nearest even, as numpy's astype does, at a fraction of its cost)
        record = ForwardRecord(
            kind=kind, step=len(self.trace), start_pos=start, token_ids=list(token_ids), cached=cached, **norms,
            logit_lens=[], logits=logits.half().cpu().numpy(), kv=self.trace.kv_stats(), forward_ms=forward_ms)
        forward = Forward(record, logits, queries, lens_inputs, rec.raw_logits() if rec is not None else None)
        if self.lens and lens_inputs is not None:
            self.trace.fill_lens(forward)
        record.extra["record_ms"] = (time.perf_counter() - t1) * 1e3
        return forward

    def _sample_into(self, index: int, params: SamplingParams, force: int | None = None) -> None:
        """Draw (or force) the token of step `index`; it becomes generated_ids[index] (the sequence keeps its
        text and finish reason)."""
        forward = self.trace.forwards[index]
        rec, logits = forward.record, forward.logits
        t0 = time.perf_counter()
        result = loop.choose(self.seq, logits, params, self.levers, force, index)
        rec.sample_ms = (time.perf_counter() - t0) * 1e3
        rec.sample = sample_record(result, logits, params, self.tokenizer.piece, precap=self._precap(forward))

    def _check(self, params: SamplingParams, checked: bool = False) -> None:
        """NumberError (an InputError) unless `params` are valid: checked by their maker, by this session, or now."""
        if not (checked or params is self._valid):
            params.validate()
        self._valid = params

    def _precap(self, forward: Forward) -> tuple[float, "torch.Tensor"] | None:
        """(cap, logits before it) of a forward in a family with a final logit soft-cap (the Sampling view)."""
        return None if forward.logits_raw is None else (self.config.final_logit_softcapping, forward.logits_raw)
