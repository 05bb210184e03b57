"""Paged KV cache: batched decode through it equals each request's solo run; block accounting; waste."""

from __future__ import annotations

import pytest
import torch

from inspector.engine.steps import decode_step, new_cache, prefill, step_rows
from inspector.serving.paged_cache import BlockManager, OutOfBlocks, PagedKVCache
from tests.support.viz_records import tiny_loaded  # noqa: F401

PROMPTS = [[5, 9, 23, 40, 7], [11, 3], list(range(30, 51)), [100, 101, 102, 103, 104, 105, 106, 107]]


def solo_greedy(model, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and each step's logits of one request alone on the contiguous KVCache."""
    cache = new_cache(model)
    logits = prefill(model, prompt, cache)
    tokens, all_logits = [], [logits]
    for _ in range(steps - 1):
        tokens.append(int(logits.argmax()))
        logits = decode_step(model, tokens[-1], cache)
        all_logits.append(logits)
    tokens.append(int(logits.argmax()))
    return tokens, all_logits


def make_cache(loaded, num_blocks: int = 32, block_size: int = 4) -> PagedKVCache:
    return PagedKVCache(loaded.config, num_blocks, block_size)


def test_batched_decode_through_paged_cache_matches_solo_runs(tiny_loaded):
    model, steps = tiny_loaded.model, 6
    cache = make_cache(tiny_loaded)
    ids = list(range(len(PROMPTS)))
    for s in ids:
        cache.add(s)
    view = cache.batch(ids)
    logits = step_rows(model, PROMPTS, view)  # every prompt's prefill in one padded forward
    tokens = [[int(row.argmax())] for row in logits]
    batched_logits = [[row] for row in logits]
    for _ in range(steps - 1):
        logits = step_rows(model, [[t[-1]] for t in tokens], view)  # rows at different positions
        for b, row in enumerate(logits):
            tokens[b].append(int(row.argmax()))
            batched_logits[b].append(row)
    assert view.lengths == [len(p) + steps - 1 for p in PROMPTS]
    for b, prompt in enumerate(PROMPTS):
        solo_tokens, solo_logits = solo_greedy(model, prompt, steps)
        assert tokens[b] == solo_tokens
        for got, want in zip(batched_logits[b], solo_logits):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_keys_land_in_the_rows_blocks_and_read_back(tiny_loaded):
    model = tiny_loaded.model
    cache = make_cache(tiny_loaded, block_size=4)
    solo = new_cache(model)
    prefill(model, PROMPTS[2], solo)
    cache.add(7)
    cache.add(8)
    step_rows(model, [PROMPTS[1], PROMPTS[2]], cache.batch([8, 7]))
    view = cache.batch([7, 8])
    for layer in range(cache.num_layers):
        k, v = view.read(layer, row=0)  # sequence 7 fed the 21-token prompt
        want_k, want_v = solo.read(layer)
        torch.testing.assert_close(k, want_k, atol=1e-5, rtol=0)
        torch.testing.assert_close(v, want_v, atol=1e-5, rtol=0)
    # 21 prompt positions in blocks of 4 -> 6 blocks; the 2-token prompt -> 1 block
    assert len(cache.tables[7].blocks) == 6 and len(cache.tables[8].blocks) == 1
    assert not set(cache.tables[7].blocks) & set(cache.tables[8].blocks)


def test_blocks_allocated_on_demand_and_freed_on_finish(tiny_loaded):
    cache = make_cache(tiny_loaded, num_blocks=8, block_size=4)
    cache.add(0)
    assert cache.manager.num_used == 0
    cache.reserve(0, 4)
    assert cache.tables[0].blocks == [0] and cache.manager.num_used == 1
    cache.batch([0]).advance(4)
    cache.reserve(0, 1)  # position 4 opens the second block
    assert cache.tables[0].blocks == [0, 1]
    cache.batch([0]).advance(1)
    cache.reserve(0, 3)  # positions 5..7 fit in block 1
    assert cache.manager.num_used == 2
    cache.free(0)
    assert cache.manager.num_used == 0 and cache.manager.ref_counts == [0] * 8


def test_fork_shares_blocks_and_copy_on_write_leaves_the_parent_untouched(tiny_loaded):
    model = tiny_loaded.model
    cache = make_cache(tiny_loaded, num_blocks=16, block_size=4)
    prompt = PROMPTS[0]  # 5 tokens: one full block and one partial block
    cache.add(0, max_len=12)
    logits = step_rows(model, [prompt], cache.batch([0]))
    first = int(logits[0].argmax())
    parent_blocks = list(cache.tables[0].blocks)
    parent_before = [cache.k_pool[0][b * 4:(b + 1) * 4].clone() for b in parent_blocks]
    cache.fork(0, 1)
    cache.fork(0, 2)
    assert cache.tables[1].blocks == parent_blocks
    assert [cache.manager.ref_counts[b] for b in parent_blocks] == [3, 3]
    assert cache.manager.num_used == 2

    # child 1 writes position 5, inside the shared partial block: it gets its own copy of that block only
    child_logits = step_rows(model, [[first]], cache.batch([1]))
    b0, b1 = parent_blocks
    assert cache.tables[1].blocks[0] == b0 and cache.tables[1].blocks[1] != b1
    assert cache.manager.ref_counts[b0] == 3 and cache.manager.ref_counts[b1] == 2
    for b, before in zip(parent_blocks, parent_before):
        assert torch.equal(cache.k_pool[0][b * 4:(b + 1) * 4], before)  # the parent's blocks are unchanged
    copy = cache.tables[1].blocks[1]
    assert torch.equal(cache.k_pool[0][copy * 4:copy * 4 + 1], parent_before[1][:1])  # prompt position 4 copied

    # the child's continuation equals the solo run's second step
    _, solo_logits = solo_greedy(model, prompt, 2)
    torch.testing.assert_close(child_logits[0], solo_logits[1], atol=1e-4, rtol=0)

    cache.free(0)
    cache.free(2)
    assert cache.manager.ref_counts[b1] == 0 and cache.manager.ref_counts[b0] == 1  # child 1 still holds b0
    cache.free(1)
    assert cache.manager.num_used == 0


def test_waste_against_contiguous_caches_computed_by_hand(tiny_loaded):
    cfg = tiny_loaded.config  # 2 layers, 2 KV heads, head_dim 16, fp32
    cache = make_cache(tiny_loaded, num_blocks=10, block_size=4)
    per_position = 2 * 2 * 2 * 16 * 4  # K and V x layers x KV heads x head_dim x 4 bytes = 512
    assert cache.bytes_per_position == per_position
    assert per_position == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    for seq_id, (length, max_len) in enumerate([(5, 40), (1, 20), (8, 8)]):
        cache.add(seq_id, max_len=max_len)
        cache.reserve(seq_id, length)
        cache.batch([seq_id]).advance(length)
    u = cache.usage()
    assert u.blocks_used == 2 + 1 + 2  # ceil(5/4) + ceil(1/4) + ceil(8/4)
    assert u.tokens_stored == 14
    assert u.bytes_used == 5 * 4 * 512 == 10240
    assert u.bytes_contiguous == (40 + 20 + 8) * 512 == 34816
    assert u.waste_bytes == 34816 - 10240
    assert cache.pool_nbytes == 2 * 2 * (10 * 4 + 1) * 2 * 16 * 4  # K,V x layers x (slots + zero slot) x KV x d x 4


def test_a_request_that_cannot_fit_is_refused_alone(tiny_loaded):
    cache = make_cache(tiny_loaded, num_blocks=4, block_size=4)
    cache.add(0)
    cache.reserve(0, 6)  # 2 blocks
    cache.add(1)
    with pytest.raises(OutOfBlocks):
        cache.reserve(1, 9)  # needs 3, 2 are free
    assert cache.tables[1].blocks == [] and cache.manager.num_free == 2  # nothing half-allocated
    assert cache.tables[0].blocks == [0, 1]
    cache.reserve(1, 8)  # a request that fits still gets in
    assert cache.manager.num_free == 0


def test_block_manager_refuses_double_free():
    m = BlockManager(2)
    b = m.allocate()
    m.release(b)
    with pytest.raises(ValueError):
        m.release(b)
    with pytest.raises(ValueError):
        BlockManager(0)


def test_parallel_sampling_children_decode_together_like_solo_runs(tiny_loaded):
    """n continuations of one prompt: one prefill, n forks, then a batched decode where every child writes
    into the shared partial block in the same forward; each matches the solo run of prompt + its token."""
    model = tiny_loaded.model
    cache = make_cache(tiny_loaded, num_blocks=16, block_size=4)
    prompt = PROMPTS[0]  # 5 tokens: blocks [full, partial]
    cache.add(0)
    step_rows(model, [prompt], cache.batch([0]))
    children, firsts = [1, 2, 3], [17, 42, 99]  # as if sampled: a different first token per child
    for c in children:
        cache.fork(0, c)
    cache.free(0)  # the parent is done: the children alone share its blocks
    shared_full = cache.tables[1].blocks[0]
    assert cache.manager.ref_counts[shared_full] == 3
    view = cache.batch(children)
    logits = step_rows(model, [[t] for t in firsts], view)  # (3, V)
    logits2 = step_rows(model, [[int(row.argmax())] for row in logits], view)
    assert [cache.tables[c].blocks[0] for c in children] == [shared_full] * 3  # full block still shared
    assert len({cache.tables[c].blocks[1] for c in children}) == 3  # each child owns its partial block
    assert cache.manager.num_used == 4
    for b, first in enumerate(firsts):
        solo = new_cache(model)
        prefill(model, prompt, solo)
        want = decode_step(model, first, solo)
        torch.testing.assert_close(logits[b], want, atol=1e-4, rtol=0)
        torch.testing.assert_close(logits2[b], decode_step(model, int(want.argmax()), solo), atol=1e-4, rtol=0)
    for c in children:
        cache.free(c)
    assert cache.manager.num_used == 0
