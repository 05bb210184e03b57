"""Prefix caching in the paged KV cache: blocks keyed by chained hashes are reused by later requests with
the same prefix (hit rate, shared blocks, tokens not recomputed), freed cached blocks are evicted least
recently freed first, and every request's greedy output still equals its solo run, with and without
chunked prefill and under preemption."""

from __future__ import annotations

import pytest

from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.scheduler import Scheduler
from tests.support.serving import SYSTEM, solo_greedy, tiny_loaded  # noqa: F401 (fixture)


REQUESTS = [(SYSTEM + tail, n, arrival) for tail, n, arrival in [
    ([100, 101], 6, 0), ([102, 103, 104], 5, 1), ([105], 7, 3), ([106, 107, 108, 109, 110], 4, 3),
    ([111, 112], 5, 9)]]


def simulate(loaded, prefix_caching, num_blocks=64, block_size=4, max_batch=3, prefill_chunk=None):
    cache = PagedKVCache(loaded.config, num_blocks, block_size, prefix_caching=prefix_caching)
    sched = Scheduler(loaded.model, cache, max_batch=max_batch, prefill_chunk=prefill_chunk)
    for prompt, n, arrival in REQUESTS:
        sched.add(prompt, n, arrival)
    sched.step_until_done(max_steps=500)
    assert sched.done
    return sched, cache


@pytest.fixture(scope="module")
def solo(tiny_loaded):  # noqa: F811
    return [solo_greedy(tiny_loaded.model, p, n) for p, n, _ in REQUESTS]


@pytest.mark.parametrize("prefill_chunk,num_blocks", [(None, 64), (3, 64), (None, 12)],
                         ids=["whole-prompts", "chunked-prefill", "tight-pool"])
def test_batched_outputs_equal_solo_outputs_with_sharing_on(tiny_loaded, solo, prefill_chunk, num_blocks):  # noqa: F811
    sched, cache = simulate(tiny_loaded, True, num_blocks=num_blocks, prefill_chunk=prefill_chunk)
    assert [s.output_ids for s in sched.requests] == solo
    stats = cache.prefix_stats()
    assert stats.hits > 0 and stats.tokens_reused >= 12


def test_later_requests_reuse_the_system_prompt_blocks(tiny_loaded):  # noqa: F811
    on, cache = simulate(tiny_loaded, True)
    off, plain = simulate(tiny_loaded, False)
    stats = cache.prefix_stats()
    # the first request computes the system prompt; each later one finds its 3 blocks cached
    assert stats.hits == 3 * (len(REQUESTS) - 1) and stats.tokens_reused == 12 * (len(REQUESTS) - 1)
    assert plain.prefix_stats().hits == 0
    fed_on = sum(r.num_tokens for rec in on.records for r in rec.rows if r.kind == "prefill")
    fed_off = sum(r.num_tokens for rec in off.records for r in rec.rows if r.kind == "prefill")
    assert fed_off - fed_on == stats.tokens_reused


def test_free_cached_blocks_are_evicted_least_recently_freed_first(tiny_loaded):  # noqa: F811
    cache = PagedKVCache(tiny_loaded.config, 4, 2, prefix_caching=True)
    cache.add(0)
    cache.reserve(0, 4)  # blocks 0, 1
    cache.tables[0].length = 4
    cache.commit_tokens(0, [1, 2, 3, 4])
    cache.free(0)  # blocks 0 and 1 are free but still cached, after the never-used 2 and 3
    cache.add(1)
    assert cache.match_prefix(1, [1, 2, 3, 4, 5]) == 4 and cache.tables[1].blocks == [0, 1]
    cache.free(1)
    cache.add(2)
    cache.reserve(2, 6)  # takes 2, 3 (never cached), then 0: the least recently freed cached block
    assert cache.tables[2].blocks == [2, 3, 0]
    cache.add(3)
    assert cache.match_prefix(3, [1, 2, 3, 4, 5]) == 0  # block 0 was evicted: the chain breaks at once
