"""Continuous batching over the paged KV cache: a `Scheduler` with `waiting` and `running` queues.

The shape of nano-vllm's engine (with vLLM v1's name for what the scheduler holds):
- `Request`: one request (one continuation of a prompt): its generation (`gen`, the generation loop's
  `Sequence`: prompt and generated ids, finish reason), its status and timings (its block table lives in
  the `PagedKVCache` under its `request_id`), its sampling params (greedy when none are given).
- Parallel sampling: `add(..., n=k, params=...)` queues k continuations of one prompt. The first is
  admitted with room for all k in the batch; its prompt is prefilled once, and when it is cached the
  others fork it (`PagedKVCache.fork`: shared blocks, reference counts; the last partial block is copied
  on its first write). Continuation i draws with `sample(logits, params with seed + i,
  generator_for(seed + i, position))`, so each equals a solo run with that seed stream.
- `Scheduler.step()` is one engine step, one batched forward:
  1. `schedule()`: every running request gets a row (a decode row of one token, or the next prompt chunk
     of a request still prefilling); when the pool cannot hold every running row's new positions the
     newest running request is preempted (its blocks freed, back to the front of `waiting`, recomputed
     from its prompt and the tokens it already generated when readmitted). Then arrived waiting requests
     are admitted in order (arrival step, then submission order) while the batch has room and the pool
     has the blocks for their first chunk; their prefill rides in the same forward as extra rows. No
     admission in a step that preempted (the blocks just freed are what the running ones need).
  2. one forward of the generation loop (`inspector.generation.loop.forward`, with the scheduler's levers)
     over all rows through the cache's batch view;
  3. `postprocess()`: a request whose prompt is fully cached takes its next token through the loop's
     `choose`; when its generation says it finished (EOS, max new tokens) its blocks are freed.
  Each `StepRecord` carries the forward's FLOPs and bytes moved (`roofline.forward_cost` over its rows'
  new tokens and cached context; for a mixture of experts, the distinct experts its real tokens went to in
  each layer, read from the forward's routing) and the forward's own wall time, for the roofline.
- Prefix caching (a cache made with `prefix_caching=True`): an admitted request first takes the cached
  blocks of its longest cached prompt prefix (`PagedKVCache.match_prefix`) and prefills only the rest;
  every forward registers the blocks it filled. Chunked prefill (`prefill_chunk`) feeds a long prompt in
  chunks that share each step's forward with the running requests' decode rows.
- A request that could never fit (prompt + max new tokens past the whole pool or the model's context) is
  refused alone when submitted; the others run.
Everything but the timings is deterministic given the inputs. Each step appends a `StepRecord`; timings
are wall clock (`clock`, perf_counter by default): a request's ttft_ms runs from the start of the step
it arrived in to the end of the step that produced its first token; tpot_ms is the mean time between its
later tokens.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.recording import ExpertUsage
from inspector.generation.levers import Levers
from inspector.generation.loop import NO_LEVERS, choose, forward
from inspector.generation.sequence import FinishReason, Sequence
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.results import Row, Status, StepRecord
from inspector.serving.roofline import forward_cost

GREEDY = SamplingParams()  # a request without sampling params decodes greedily


@dataclass
class Request:
    """One request in the scheduler: its generation (`gen`: ids, finish reason) and its scheduling state."""

    request_id: int
    gen: Sequence  # prompt and generated ids, finish reason (the generation loop's Sequence)
    arrival_step: int = 0
    status: Status = Status.WAITING
    num_cached: int = 0  # positions of `tokens` in the cache (0 again after a preemption)
    refusal: str = ""  # why a REFUSED request could never run
    preemptions: int = 0
    arrival_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    params: SamplingParams = GREEDY
    siblings: list["Request"] = field(default_factory=list)  # continuations forked from this one after its prompt
    parent: int | None = None  # the request whose prompt blocks this continuation shares

    @property
    def prompt_ids(self) -> list[int]:
        return self.gen.prompt_ids

    @property
    def output_ids(self) -> list[int]:
        return self.gen.generated_ids

    @property
    def max_new_tokens(self) -> int:
        return self.gen.max_new_tokens

    @property
    def finish_reason(self) -> str | None:
        """Why it ended, in words: the finish reason's name, or for a refused request why it was refused."""
        if self.status is Status.REFUSED:
            return self.refusal
        return None if self.gen.finish is None else str(self.gen.finish)

    @property
    def tokens(self) -> list[int]:
        return self.gen.ids

    @property
    def max_len(self) -> int:
        return len(self.prompt_ids) + self.max_new_tokens

    @property
    def prefilling(self) -> bool:
        """The cache still lacks some of the tokens before the last one (the prompt, or a recompute)."""
        return self.num_cached < len(self.tokens) - (1 if self.output_ids else 0)

    @property
    def ttft_ms(self) -> float | None:
        if not self.token_times or self.arrival_time is None:
            return None
        return (self.token_times[0] - self.arrival_time) * 1e3

    @property
    def tpot_ms(self) -> float | None:
        if len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (len(self.token_times) - 1) * 1e3


class Scheduler:
    def __init__(self, model: torch.nn.Module, cache: PagedKVCache, *, max_batch: int = 8,
                 eos_ids: Iterable[int] = (), prefill_chunk: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, levers: Levers = NO_LEVERS) -> None:
        if max_batch < 1:
            raise ValueError(f"max batch must be at least 1, got {max_batch}")
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ValueError(f"prefill chunk must be at least 1, got {prefill_chunk}")
        self.model, self.cache, self.max_batch = model, cache, max_batch
        self.eos_ids, self.prefill_chunk, self.clock = frozenset(eos_ids), prefill_chunk, clock
        self.levers = levers  # the generation loop's levers, for every row of every forward
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the newest
        self.requests: list[Request] = []
        self.records: list[StepRecord] = []
        self.step_index = 0

    # ---- requests
    def add(self, prompt_ids: list[int], max_new_tokens: int, arrival_step: int = 0, *, n: int = 1,
            params: SamplingParams | None = None) -> Request:
        """Queue a request of `n` continuations (parallel sampling) and return the first; refuse the request
        alone (status REFUSED) when it could never fit. Continuation i samples with `params` and seed
        params.seed + i (its own seed stream); the others are `siblings` of the first until its prompt is
        cached, then forks of it that share the prompt's blocks."""
        context = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        params = GREEDY if params is None else params
        group = [Request(len(self.requests) + i,
                         Sequence(prompt_ids, max_new_tokens, context or 2**62, stop_ids=self.eos_ids),
                         arrival_step, params=replace(params, seed=params.seed + i))
                 for i in range(max(n, 1))]
        self.requests += group
        req = group[0]
        pool_tokens = self.cache.manager.num_blocks * self.cache.block_size
        if not prompt_ids or max_new_tokens < 1:
            req.refusal = "an empty prompt or max new tokens < 1"
        elif n < 1:
            req.refusal = f"a request needs at least 1 continuation, got {n}"
        elif n > self.max_batch:
            req.refusal = f"{n} continuations do not fit a batch of {self.max_batch}"
        elif context is not None and req.max_len > context:
            req.refusal = f"needs {req.max_len} positions; the model's context is {context}"
        elif req.max_len > pool_tokens:
            req.refusal = f"needs {req.max_len} positions; the whole pool holds {pool_tokens}"
        if req.refusal:
            for s in group:
                s.status, s.refusal = Status.REFUSED, req.refusal
                s.gen.finish = FinishReason.REFUSED
            return req
        for sib in group[1:]:
            sib.parent = req.request_id
        req.siblings = group[1:]
        # waiting stays sorted by (arrival step, submission order); preempted requests go in front
        self.waiting.append(req)
        self.waiting = deque(sorted(self.waiting, key=lambda s: (s.preemptions == 0, s.arrival_step, s.request_id)))
        return req

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    # ---- one engine step
    def _chunk(self, req: Request) -> list[int]:
        """The tokens this request feeds now: the next prompt (or recompute) chunk, or its last token."""
        if not req.prefilling:
            return [req.tokens[-1]]
        end = len(req.tokens) - (1 if req.output_ids else 0)
        if self.prefill_chunk is not None:
            end = min(end, req.num_cached + self.prefill_chunk)
        if not req.output_ids or end < len(req.tokens) - 1:
            return req.tokens[req.num_cached:end]
        return req.tokens[req.num_cached:]  # a recompute's last chunk also feeds the last generated token

    def preempt(self, req: Request) -> None:
        """Free the request's blocks and queue it first; it is recomputed when readmitted."""
        self.running.remove(req)
        self.cache.free(req.request_id)
        req.status, req.num_cached = Status.WAITING, 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    def schedule(self) -> tuple[list[tuple[Request, list[int]]], list[int], list[int]]:
        """This step's rows (request, tokens it feeds), the requests admitted and preempted."""
        preempted: list[int] = []
        for req in list(self.running):  # oldest first: they keep their blocks
            if req not in self.running:
                continue
            need = len(self._chunk(req))
            while self.cache.blocks_needed(req.request_id, need) > self.cache.manager.num_free:
                victim = self.running[-1]
                self.preempt(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    break
            if req in self.running:
                self.cache.reserve(req.request_id, need)
        rows = [(req, self._chunk(req)) for req in self.running]
        admitted: list[int] = []
        while not preempted and self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            if req.arrival_step > self.step_index or len(self.running) + 1 + len(req.siblings) > self.max_batch:
                break  # not arrived yet, or no room for all its continuations
            self.cache.add(req.request_id, max_len=req.max_len)
            req.num_cached = self.cache.match_prefix(req.request_id, req.tokens)  # 0 without prefix caching
            chunk = self._chunk(req)
            if self.cache.blocks_needed(req.request_id, len(chunk)) > self.cache.manager.num_free:
                self.cache.free(req.request_id)
                req.num_cached = 0
                break  # admission stays in order: nobody jumps the queue
            self.cache.reserve(req.request_id, len(chunk))
            self.waiting.popleft()
            req.status = Status.RUNNING
            self.running.append(req)
            rows.append((req, chunk))
            admitted.append(req.request_id)
        return rows, admitted, preempted

    def step(self) -> StepRecord:
        start = self.clock()
        for req in self.waiting:
            if req.arrival_time is None and req.arrival_step <= self.step_index:
                req.arrival_time = start
        rows, admitted, preempted = self.schedule()
        new_tokens: dict[int, int] = {}
        finished: list[int] = []
        kinds = [Row(req.request_id, "prefill" if req.prefilling else "decode", len(ids), req.num_cached)
                 for req, ids in rows]
        elem = torch.empty((), dtype=self.cache.dtype).element_size()
        cfg, forward_ms = self.model.config, 0.0
        usage = ExpertUsage(cfg.num_hidden_layers, [len(ids) for _, ids in rows]) if cfg.moe and rows else None
        if rows:
            view = self.cache.batch([req.request_id for req, _ in rows])
            t0 = self.clock()
            logits = forward(self.model, view, [ids for _, ids in rows], self.levers, usage)  # (B, V) fp32
            now, blocks_used = self.clock(), self.cache.manager.num_used  # in use by this forward, before frees
            forward_ms = (now - t0) * 1e3
            finished = self.postprocess(rows, logits, now, new_tokens)
        else:
            now, blocks_used = self.clock(), self.cache.manager.num_used
        cost = forward_cost(cfg, [(r.num_tokens, r.context) for r in kinds], elem, usage and usage.distinct())
        record = StepRecord(self.step_index, kinds, blocks_used, admitted, preempted, finished,
                            new_tokens, (now - start) * 1e3, cost.flops, cost.bytes_moved, forward_ms)
        self.records.append(record)
        self.step_index += 1
        return record

    def fork_siblings(self, req: Request) -> list[Request]:
        """Its prompt is cached: each waiting continuation becomes a running fork sharing the prompt's blocks."""
        for sib in req.siblings:
            self.cache.fork(req.request_id, sib.request_id)
            sib.num_cached, sib.arrival_time, sib.status = req.num_cached, req.arrival_time, Status.RUNNING
            self.running.append(sib)
        forks, req.siblings = req.siblings, []
        return forks

    def postprocess(self, rows: list[tuple[Request, list[int]]], logits: torch.Tensor, now: float,
                    new_tokens: dict[int, int]) -> list[int]:
        """Commit each row's positions, take the next token of rows past their prompt (and of the forks that
        share it), retire finished ones."""
        finished = []
        for (req, ids), row_logits in zip(rows, logits):
            req.num_cached += len(ids)
            self.cache.commit_tokens(req.request_id, req.tokens[:req.num_cached])
            if req.prefilling:
                continue  # a prompt chunk that is not the last: no token yet
            for member in [req, *self.fork_siblings(req)]:  # forks first: a finishing req frees its blocks
                token = choose(member.gen, row_logits, member.params, self.levers).token
                member.token_times.append(now)
                new_tokens[member.request_id] = token
                if member.gen.finish is not None:
                    member.status = Status.FINISHED
                    self.running.remove(member)
                    self.cache.free(member.request_id)
                    finished.append(member.request_id)
        return finished

    def step_until_done(self, max_steps: int = 100_000) -> list[StepRecord]:
        """Step until every request finished (or was refused)."""
        while not self.done and self.step_index < max_steps:
            self.step()
        return self.records
