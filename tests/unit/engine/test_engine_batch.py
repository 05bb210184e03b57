"""Several requests in one forward: each row equals its solo run, whatever the other rows hold (different
positions, different numbers of new tokens, padding), and the KV cache keeps rows apart (per-row lengths,
advance, truncate, read, measured bytes). Also the greedy loop built from prefill/decode_step equals
recomputing the whole sequence every step."""

from __future__ import annotations

import pytest
import torch
from tests.support.engine_fixtures import tiny_model

from inspector.engine import steps as engine
from inspector.engine.model import Transformer

ATOL = 1e-5  # fp32: a batched matmul may round differently from the solo one


@pytest.fixture(scope="module")
def model() -> Transformer:
    return tiny_model(num_key_value_heads=2, max_position_embeddings=512)


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def solo(model: Transformer, chunks: list[list[int]]) -> list[torch.Tensor]:
    """Next-token logits after each chunk fed to one request's own cache (prefill, then chunks)."""
    cache = engine.new_cache(model)
    out = [engine.prefill(model, chunks[0], cache)]
    for chunk in chunks[1:]:
        out.append(engine.step_rows(model, [chunk], cache)[0])
    return out


def test_rows_equal_their_solo_runs(model):
    """Three requests with prompts of 5, 17 and 9 tokens (padded), then mixed rounds: one row decodes
    one token while another feeds several (a second prompt chunk), and a row two at a time."""
    rows = [[ids(5, 1), [7], [8], ids(4, 11)],
            [ids(17, 2), ids(3, 12), [9], [10]],
            [ids(9, 3), [11], ids(2, 13), [12]]]
    cache = engine.new_cache(model, batch=3)
    batched = [engine.step_rows(model, [r[i] for r in rows], cache) for i in range(4)]  # each (3, V)
    assert cache.lengths == [sum(len(c) for c in r) for r in rows]
    for b, r in enumerate(rows):
        want = solo(model, r)
        for i in range(4):
            assert (batched[i][b] - want[i]).abs().max().item() < ATOL, (b, i)


def test_rows_at_the_same_position_equal_solo_bit_for_bit_where_the_ops_allow(model):
    """Two rows of equal length: every op is the solo op on a larger batch."""
    a, b = ids(12, 4), ids(12, 5)
    cache = engine.new_cache(model, batch=2)
    both = engine.step_rows(model, [a, b], cache)
    nxt = engine.step_rows(model, [[3], [4]], cache)
    for row, (prompt, tok) in enumerate([(a, 3), (b, 4)]):
        want = solo(model, [prompt, [tok]])
        assert (both[row] - want[0]).abs().max().item() < ATOL
        assert (nxt[row] - want[1]).abs().max().item() < ATOL


def test_padded_uncached_forward_equals_each_row_alone(model):
    a, b = ids(10, 6), ids(4, 7)
    tokens = torch.tensor([a, b + [0] * 6])
    positions = torch.tensor([list(range(10)), list(range(4)) + [-1] * 6])
    with torch.inference_mode():
        both = model(tokens, positions=positions)  # (2, 10, V)
        alone_a, alone_b = model(torch.tensor([a])), model(torch.tensor([b]))
    assert (both[0] - alone_a[0]).abs().max().item() < ATOL
    assert (both[1, :4] - alone_b[0]).abs().max().item() < ATOL
    assert torch.isfinite(both).all()  # padded slots compute something finite (and meaningless)


def test_padded_slots_are_never_written_to_the_cache(model):
    cache = engine.new_cache(model, batch=2)
    engine.step_rows(model, [ids(3, 8), ids(11, 9)], cache)
    assert cache.lengths == [3, 11]
    cache.advance([8, 0])  # expose row 0's slots past its 3 tokens, where its padding would have gone
    for layer in range(model.config.num_hidden_layers):
        k, v = cache.read(layer, row=0)
        assert torch.all(k[:, 3:] == 0) and torch.all(v[:, 3:] == 0)  # still as allocated: zeros
        assert torch.all(k[:, :3].abs().sum(-1) > 0) and torch.all(cache.read(layer, row=1)[0].abs().sum(-1) > 0)


def test_truncating_one_row_then_continuing_equals_solo(model):
    a, b = ids(8, 10), ids(8, 11)
    cache = engine.new_cache(model, batch=2)
    engine.step_rows(model, [a, b], cache)
    engine.step_rows(model, [[1], [2]], cache)
    cache.truncate(5, row=1)  # row 1 branches back to its first 5 prompt tokens
    assert cache.lengths == [9, 5]
    with pytest.raises(ValueError, match="different lengths"):
        cache.length
    got = engine.step_rows(model, [[3], [4, 5]], cache)
    assert (got[0] - solo(model, [a, [1], [3]])[2]).abs().max().item() < ATOL
    assert (got[1] - solo(model, [b[:5], [4, 5]])[1]).abs().max().item() < ATOL


def test_positions_that_break_the_contract_are_refused(model):
    cache = engine.new_cache(model, batch=2)
    engine.step_rows(model, [[1, 2], [3]], cache)
    tokens = torch.tensor([[4, 5], [6, 7]])
    bad = {
        "wrong start": [[2, 3], [2, 3]],  # row 1 holds 1 position, so it must start at 1
        "pad before a real slot": [[2, 3], [-1, 1]],
        "gap": [[2, 4], [1, 2]],
    }
    for why, pos in bad.items():
        with pytest.raises(ValueError, match="positions"), torch.inference_mode():
            model(tokens, cache, positions=torch.tensor(pos))
    with pytest.raises(ValueError, match="shape"), torch.inference_mode():
        model(tokens, cache, positions=torch.tensor([[2, 3]]))


def test_explicit_positions_of_one_request_change_nothing(model):
    tokens = ids(20, 12)
    cache_a, cache_b = engine.new_cache(model), engine.new_cache(model)
    with torch.inference_mode():
        a = model(torch.tensor([tokens]), cache_a)
        b = model(torch.tensor([tokens]), cache_b, positions=torch.arange(20)[None])
    assert torch.equal(a, b)


# ---- the KV cache's own API

def test_cache_lengths_read_and_bytes(model):
    cfg = model.config
    cache = engine.new_cache(model, batch=2)
    assert cache.nbytes == cache.allocated_nbytes == cache.capacity == 0
    engine.step_rows(model, [ids(3, 13), ids(7, 14)], cache)
    k, v = cache.read(1, row=1)
    assert k.shape == v.shape == (cfg.num_key_value_heads, 7, cfg.head_dim)
    assert cache.read(1, row=0)[0].shape[1] == 3 and cache.read(1, row=1, end=2)[0].shape[1] == 2
    with pytest.raises(ValueError, match="cannot read"):
        cache.read(0, row=0, end=4)
    per_entry = cfg.num_key_value_heads * cfg.head_dim * 4  # fp32 K or V of one position, one layer
    assert cache.layer_nbytes(0) == 2 * per_entry * (3 + 7)
    assert cache.layer_nbytes(1) == sum(t.nbytes for r in range(2) for t in cache.read(1, row=r))  # the views' bytes
    assert cache.nbytes == cfg.num_hidden_layers * 2 * per_entry * 10
    # allocated: whole buffers of `step` positions per row, whatever is in use
    assert cache.capacity == cache.step
    assert cache.allocated_nbytes == cfg.num_hidden_layers * 2 * 2 * cache.step * per_entry
    cache.advance([0, 0])
    with pytest.raises(ValueError, match="counts"):
        cache.advance([1])
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(4, row=0)
    cache.truncate(2)
    assert cache.lengths == [2, 2] and cache.length == 2 and cache.layer_nbytes(0) == 2 * per_entry * 4


def test_cache_grows_in_steps_and_keeps_rows(model):
    cache = engine.new_cache(model, batch=2)
    cache.step = 8
    engine.step_rows(model, [ids(6, 15), ids(2, 16)], cache)
    before = [cache.read(layer, row=r)[0].clone() for layer in range(2) for r in range(2)]
    assert cache.capacity == 8
    engine.step_rows(model, [ids(5, 17), [1]], cache)  # row 0 needs 11 positions: grows to 16
    assert cache.capacity == 16 and cache.lengths == [11, 3]
    after = [cache.read(layer, row=r, end=n)[0] for layer in range(2) for r, n in ((0, 6), (1, 2))]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    per_entry = model.config.num_key_value_heads * model.config.head_dim * 4
    assert cache.allocated_nbytes == model.config.num_hidden_layers * 2 * 2 * 16 * per_entry  # K, V x 2 rows x 16


# ---- the generation loop from the engine's pieces

def test_greedy_cached_loop_equals_recompute(model):
    """Greedy tokens from prefill + decode_step equal those from recomputing the sequence every step."""
    tokens = ids(9, 18)
    cache = engine.new_cache(model)
    cached, logits = list(tokens), engine.prefill(model, tokens, cache)
    full = list(tokens)
    for _ in range(8):
        cached.append(int(logits.argmax()))
        full_logits, _ = engine.recompute_step(model, full)
        assert (full_logits - logits).abs().max().item() < 1e-4
        full.append(int(full_logits.argmax()))
        logits = engine.decode_step(model, cached[-1], cache)
    assert cached == full and cache.length == len(cached)  # the last token was fed too
