"""Prefix caching and chunked prefill compared on one workload: the same requests served four ways by the
real scheduler (`inspector.serving.scheduler.Scheduler` over `inspector.serving.paged_cache.PagedKVCache`).

`library_workload(tokenizer, n)` is the workload of the Serving lab and `bench.prefix_cache`: the chat
template around one system prompt (a library help desk, about 200 tokens) and n short questions.
`compare(model, config, dtype, prompts, max_new, ...)` serves `prompts` (request i arrives at step
i x `arrival_every`) as plain serving, with prefix caching, with chunked prefill of `chunk` tokens, and with
both, and returns one `ConfigRun` per configuration: TTFT and TPOT per request (wall clock of this machine),
the prefix cache's hit rate, the most blocks shared at once, the prompt tokens computed, steps and wall time.
Decoding is greedy, so the four should produce the same tokens, up to float rounding (reused blocks and chunks
change the order of additions; a near-tie can flip); `same_outputs` checks each against plain serving.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from inspector.engine.config import ModelConfig
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.results import ConfigRun
from inspector.serving.scheduler import Scheduler

SYSTEM = ("You are the help desk of a public library. Answer in one or two short sentences, politely and "
          "precisely. The library opens at nine in the morning and closes at eight in the evening on weekdays, "
          "and at five on Saturdays; it is closed on Sundays and public holidays. Members may borrow up to "
          "twelve books for three weeks and renew them twice online, unless another member has reserved them. "
          "Late returns cost twenty cents per book per day. The reading room on the second floor is quiet; "
          "group rooms on the first floor can be booked for two hours at a time. Printing costs ten cents a "
          "page in black and white and fifty cents in colour. Wi-Fi is free: the network is called Library-Guest "
          "and needs no password. If you do not know an answer, say so and suggest asking at the front desk.")
QUESTIONS = ["When do you open on Saturday?", "How many books can I borrow?", "Is the Wi-Fi free?",
             "How much does colour printing cost?", "Can I book a group room?", "What is the fine for late books?",
             "Are you open on Sunday?", "Can I renew a reserved book?", "Where is the quiet room?",
             "How long can I keep a book?", "What is the Wi-Fi network called?", "Do you open on holidays?"]


def library_workload(tokenizer, n: int) -> list[list[int]]:
    """n chat prompts sharing the library's system prompt, one question each (the questions repeat after 12)."""
    return [tokenizer.prompt_ids(QUESTIONS[i % len(QUESTIONS)], True, SYSTEM) for i in range(n)]


def serve(model: torch.nn.Module, config: ModelConfig, dtype: torch.dtype, prompts: Sequence[list[int]],
          max_new: int, *, prefix_caching: bool, chunk: int | None, arrival_every: int = 2,
          block_size: int = 16, max_batch: int = 4) -> tuple[ConfigRun, list[list[int]]]:
    """One configuration: the run's record and every request's output ids."""
    longest = max(len(p) for p in prompts) + max_new
    blocks = max_batch * -(-longest // block_size) + 8  # room for a full batch, so nothing is preempted
    cache = PagedKVCache(config, blocks, block_size, dtype=dtype, prefix_caching=prefix_caching)
    sched = Scheduler(model, cache, max_batch=max_batch, eos_ids=(), prefill_chunk=chunk)
    for i, ids in enumerate(prompts):
        sched.add(list(ids), max_new, i * arrival_every)
    shared, t0 = 0, time.perf_counter()
    while not sched.done:
        sched.step()
        shared = max(shared, cache.prefix_stats().blocks_shared)
    wall = time.perf_counter() - t0
    stats = cache.prefix_stats()
    computed = sum(r.num_tokens for rec in sched.records for r in rec.rows if r.kind == "prefill")
    labels = {(False, False): "plain", (True, False): "prefix caching",
              (False, True): f"chunked prefill {chunk}", (True, True): f"both (chunk {chunk})"}
    label = labels[(prefix_caching, bool(chunk))]
    run = ConfigRun(label, prefix_caching, chunk, [s.ttft_ms for s in sched.requests],
                    [s.tpot_ms for s in sched.requests if s.tpot_ms], stats.hit_rate, shared, computed,
                    len(sched.records), wall, True)
    return run, [list(s.output_ids) for s in sched.requests]


def compare(model: torch.nn.Module, config: ModelConfig, dtype: torch.dtype, prompts: Sequence[list[int]],
            max_new: int, *, chunk: int = 64, arrival_every: int = 2, block_size: int = 16,
            max_batch: int = 4) -> list[ConfigRun]:
    """Plain, prefix caching, chunked prefill, both: one `ConfigRun` each (see the module docstring)."""
    runs, base = [], None
    for prefix, ch in [(False, None), (True, None), (False, chunk), (True, chunk)]:
        run, outputs = serve(model, config, dtype, prompts, max_new, prefix_caching=prefix, chunk=ch,
                             arrival_every=arrival_every, block_size=block_size, max_batch=max_batch)
        base = base if base is not None else outputs
        runs.append(run if outputs == base else replace(run, same_outputs=False))
    return runs
