"""Tiled attention with the online softmax equals the standard path: the kernel on random tensors (grouped
heads, shared and per-row positions, evicted keys, tiles that do not divide the keys), the model's logits
within 1e-5 in fp32 with the same greedy ids (the default model: within 1e-5 in float64, and in fp32 no
further from the float64 logits than twice the standard path), the trace points still firing, the step-through's last state
being the attention output, and `inspector run --attention tiled`."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main
from inspector.engine.scores import attention_weights, future_mask, masked_scores, softmax32
from inspector.engine.flash import hbm_bytes, step_through, tiled_attend
from inspector.engine.model import set_attention
from inspector.engine.steps import new_cache, step_rows
from inspector.generation import loop
from inspector.generation.cache_policies import HeavyHitters
from inspector.generation.levers import Levers
from tests.support.engine_fixtures import tiny_model

IDS = [int(i) for i in torch.randint(0, 300, (150,), generator=torch.Generator().manual_seed(2))]


def standard(q, k, v, q_pos, hidden, n_rep):
    B, H, T, d = q.shape
    future = future_mask(q_pos, T, k.shape[2], q.device)
    if hidden is not None:
        future = hidden if future is None else future | hidden
    p = softmax32(masked_scores(q, k, future, n_rep))  # (B, H, T, S)
    return torch.einsum("bhts,bhsd->bhtd", p, v.repeat_interleave(n_rep, dim=1))


@pytest.mark.parametrize("T,S,tile", [(37, 37, 8), (1, 90, 16), (5, 70, 64), (20, 20, 64)])
def test_kernel_equals_the_standard_path(T, S, tile):
    g = torch.Generator().manual_seed(T * S)
    B, KV, n_rep, d = 2, 2, 3, 16
    q = torch.randn(B, KV * n_rep, T, d, generator=g)
    k, v = torch.randn(B, KV, S, d, generator=g), torch.randn(B, KV, S, d, generator=g)
    first = S - T
    assert torch.allclose(tiled_attend(q, k, v, first, None, n_rep, tile), standard(q, k, v, first, None, n_rep), atol=1e-5)
    hidden = torch.zeros(B, KV * n_rep, 1, S, dtype=torch.bool)
    hidden[0, :, :, 1:S // 2:3] = True
    hidden[1, 2, :, 1:S // 3] = True  # one head of one row lost most of its first third (key 0 stays)
    assert torch.allclose(tiled_attend(q, k, v, first, hidden, n_rep, tile),
                          standard(q, k, v, first, hidden, n_rep), atol=1e-5)
    rows = torch.stack([torch.arange(first, S), torch.arange(first, S) - 1]).clamp(min=0)  # per-row positions
    assert torch.allclose(tiled_attend(q, k, v, rows, None, n_rep, tile), standard(q, k, v, rows, None, n_rep), atol=1e-5)


def generate(model, n):
    cache, ids = new_cache(model), list(IDS)
    logits = [loop.forward(model, cache, [ids])[0]]
    out = []
    for _ in range(n):
        out.append(int(logits[-1].argmax()))
        logits.append(loop.forward(model, cache, [[out[-1]]])[0])
    return out, torch.stack(logits)


def test_the_model_gives_the_same_logits_and_greedy_ids():
    model = tiny_model()
    ids, logits = generate(model, 24)
    set_attention(model, "tiled")
    try:
        tiled_ids, tiled_logits = generate(model, 24)
    finally:
        set_attention(model, "standard")
    assert tiled_ids == ids
    assert (tiled_logits - logits).abs().max() <= 1e-5


def test_batched_rows_and_an_eviction_policy_match_too():
    model = tiny_model()

    def run():
        cache = new_cache(model, batch=2)
        first = step_rows(model, [IDS[:40], IDS[:17]], cache)
        second = step_rows(model, [[5], [9]], cache)
        levers = Levers(cache_policy=HeavyHitters(12))
        single = new_cache(model)
        loop.forward(model, single, [IDS[:30]], levers)
        third = loop.forward(model, single, [[7]], levers)
        return torch.cat([first, second, third])

    ref = run()
    set_attention(model, "tiled")
    try:
        tiled = run()
    finally:
        set_attention(model, "standard")
    assert (tiled - ref).abs().max() <= 1e-5


def test_trace_points_still_fire_with_the_same_maps():
    model = tiny_model()

    class Keep:
        def __init__(self):
            self.seen = {}

        def wants(self, name):
            return True

        def __call__(self, name, value):
            self.seen[name] = value.clone()

    recs = []
    for kind in ("standard", "tiled"):
        set_attention(model, kind)
        rec = Keep()
        loop.forward(model, new_cache(model), [IDS[:40]], rec=rec)
        recs.append(rec.seen)
    set_attention(model, "standard")
    assert recs[0].keys() == recs[1].keys() and "blocks.1.attn.hook_pattern" in recs[1]
    for name in recs[0]:
        assert torch.allclose(recs[0][name], recs[1][name], atol=1e-5), name


def test_step_through_ends_at_the_attention_output():
    g = torch.Generator().manual_seed(0)
    T, d = 50, 8
    q, k, v = torch.randn(T, d, generator=g), torch.randn(T, d, generator=g), torch.randn(T, d, generator=g)
    steps = step_through(q, k, v, 0, tile=16)
    assert [(s.s0, s.s1) for s in steps] == [(0, 16), (16, 32), (32, 48), (48, 50)]
    p = attention_weights(q[None, None], k[None, None], 0)[0, 0]  # (T, T)
    assert torch.allclose(torch.from_numpy(steps[-1].out), p @ v, atol=1e-5)
    for a, b in zip(steps, steps[1:]):  # the running max never falls
        assert (b.m >= a.m).all()


def test_hbm_formula_drops_the_score_matrix():
    b = hbm_bytes(1024, 1024, 64, 2, block_rows=128)
    assert b["standard"] == 2 * (2 * 1024 * 64 + 2 * 1024 * 64 + 4 * 1024 * 1024)
    assert b["tiled"] == 2 * (2 * 1024 * 64 + 2 * 1024 * 64 * 8) and b["tiled"] < b["standard"]


def test_cli_tiled_generates_the_same_ids(capsys, tiny_llama_dir):  # noqa: F811
    outs = []
    for kind in ("standard", "tiled"):
        assert main(["run", "--prompt", "Hello world, the cache", "--model", str(tiny_llama_dir),
                     "--max-new-tokens", "8", "--attention", kind, "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out)["generated_ids"])
    assert outs[0] == outs[1]


def float64_copy(model):
    """The model with every weight in float64."""
    return copy.deepcopy(model).double()


def greedy(model, ids, kind, tile, n=4):
    """Greedy ids and the logits (float64) of a prefill of `ids` and n decode steps under attention `kind`."""
    set_attention(model, kind, tile)
    try:
        cache = new_cache(model)
        logits, out = [loop.forward(model, cache, [ids])[0]], []
        for _ in range(n):
            out.append(int(logits[-1].argmax()))
            logits.append(loop.forward(model, cache, [[out[-1]]])[0])
    finally:
        set_attention(model, "standard")
    return out, torch.stack(logits).double()


def test_kernel_in_float64_is_the_standard_path_to_rounding():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 6, 45, 16, generator=g, dtype=torch.float64)
    k, v = torch.randn(1, 2, 45, 16, generator=g, dtype=torch.float64), torch.randn(1, 2, 45, 16, generator=g, dtype=torch.float64)
    got = tiled_attend(q, k, v, 0, None, 3, 7)
    assert got.dtype == torch.float64
    assert (got - standard(q, k, v, 0, None, 3)).abs().max() <= 1e-12


# prompt length -> tiles: tiles that divide the prompt's keys and tiles that do not; a one-token prompt
LENGTHS_TILES = {1: (64,), 37: (37, 8), 130: (65, 48)}


@pytest.mark.slow
def test_default_model_tiled_equals_standard_to_1e5_in_float64(default_model):
    """The algorithm, free of fp32 rounding: the default model in float64 gives the same logits (to 1e-5;
    measured 0 to 4e-6, one fp32 step of the logits the model returns) and the same greedy ids."""
    m64 = float64_copy(default_model.model)
    for length, tiles in LENGTHS_TILES.items():
        ids = [int(i) for i in torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(length))]
        ref_ids, ref = greedy(m64, ids, "standard", 64)
        for tile in tiles:
            got_ids, got = greedy(m64, ids, "tiled", tile)
            assert got_ids == ref_ids, (length, tile)
            assert (got - ref).abs().max() <= 1e-5, (length, tile)


@pytest.mark.slow
def test_default_model_fp32_tiled_is_as_accurate_as_standard(default_model):
    """In fp32 the two paths round differently, and 30 layers carry the difference to the logits (up to
    about 30): they agree to 1e-4 (measured 4e-5 to 6e-5), which is the fp32 noise floor of this model, not
    a property of the tiles: the standard path itself moves by 4e-5 to 6e-5 when only its query blocks
    change size, and lies 7e-5 to 9e-5 from the float64 logits. So the honest fp32 check is against float64:
    the tiled path is no further from it than twice the standard path's distance (measured 0.9x to 1.2x),
    with the same greedy ids."""
    model = default_model.model
    m64 = float64_copy(model)
    for length, tiles in [(37, (8,)), (300, (64, 48))]:
        ids = [int(i) for i in torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(5))]
        ref_ids, ref = greedy(m64, ids, "standard", 64)
        std_ids, std = greedy(model, ids, "standard", 64)
        for tile in tiles:
            tiled_ids, tiled = greedy(model, ids, "tiled", tile)
            assert tiled_ids == std_ids == ref_ids
            assert (tiled - std).abs().max() <= 1e-4
            assert (tiled - ref).abs().max() <= 2 * (std - ref).abs().max(), (length, tile)
