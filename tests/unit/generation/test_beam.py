"""Beam search equals `transformers` generate(num_beams=..., do_sample=False) token for token on the same
weights; the record's tree is consistent; the cache reorder moves rows."""

from __future__ import annotations

import pytest
import torch

from tests.support.engine_fixtures import hf_pair, tiny_model
from inspector.engine.kv_cache import KVCache
from inspector.engine.penalties import NoRepeatNGram, RepetitionPenalty
from inspector.errors import InputError
from inspector.generation.beam import beam_search
from inspector.generation.levers import Levers
from inspector.generation.beam_tree import FINISHED, RUNNING

PROMPTS = ([1, 17, 42, 99, 5], [1, 250, 3], [1, 8, 8, 8, 120, 64, 33, 200], [7])


def hf_beams(hf, prompt, **kw) -> list[int]:
    out = hf.generate(torch.tensor([prompt]), do_sample=False, pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("num_beams,length_penalty,max_new", [(4, 1.0, 12), (3, 0.5, 9), (4, 2.0, 16)])
def test_beam_search_matches_transformers(prompt, num_beams, length_penalty, max_new):
    hf, ours, cfg = hf_pair(eos_token_id=2)
    ref = hf_beams(hf, prompt, num_beams=num_beams, max_new_tokens=max_new, length_penalty=length_penalty,
                   eos_token_id=2)
    rec = beam_search(ours, prompt, num_beams, max_new, eos_ids=[2], length_penalty=length_penalty)
    assert rec.hypotheses[0].token_ids == ref
    assert [h.score for h in rec.hypotheses] == sorted((h.score for h in rec.hypotheses), reverse=True)


def test_eos_heavy_model_finishes_early_like_transformers():
    """A model that likes EOS: hypotheses finish at different lengths and the early-stop heuristic ends it."""
    hf, ours, cfg = hf_pair(seed=3, eos_token_id=2)
    with torch.no_grad():
        for m in (hf, ours):
            m.lm_head.weight[2] += 0.35  # EOS competes with every other token
    for prompt in PROMPTS:
        ref = hf_beams(hf, prompt, num_beams=4, max_new_tokens=20, eos_token_id=2)
        rec = beam_search(ours, prompt, 4, 20, eos_ids=[2])
        assert rec.hypotheses[0].token_ids == ref
    assert any(h.token_ids[-1] == 2 for h in rec.hypotheses)


def test_beam_search_with_processors_matches_transformers():
    hf, ours, cfg = hf_pair(eos_token_id=2)
    levers = Levers(processors=(RepetitionPenalty(1.3), NoRepeatNGram(3)))
    for prompt in PROMPTS[:3]:
        ref = hf_beams(hf, prompt, num_beams=4, max_new_tokens=14, eos_token_id=2, repetition_penalty=1.3,
                       no_repeat_ngram_size=3)
        assert beam_search(ours, prompt, 4, 14, eos_ids=[2], levers=levers).hypotheses[0].token_ids == ref


def test_tree_links_every_live_beam_to_its_parent():
    model = tiny_model()
    rec = beam_search(model, PROMPTS[0], 3, 6, eos_ids=[2])
    ids = {n.id for step in rec.steps for n in step}
    for t, step in enumerate(rec.steps):
        assert len(step) == 2 * 3
        assert all(n.step == t for n in step)
        assert all(n.parent == -1 for n in step) if t == 0 else all(n.parent in ids for n in step)
        if t + 1 < len(rec.steps):
            assert sum(n.status == RUNNING for n in step) == 3
            live = {n.id for n in step if n.status == RUNNING}
            assert {n.parent for n in rec.steps[t + 1]} <= live  # every candidate continues a live beam
    best = rec.hypotheses[0]
    path = rec.path(best.node)
    by_id = {n.id: n for step in rec.steps for n in step}
    assert [by_id[i].token for i in path] == best.token_ids
    assert by_id[best.node].status == FINISHED


def test_reorder_copies_rows():
    model = tiny_model()
    cache = KVCache(model.config, batch=3)
    k = torch.arange(3.0)[:, None, None, None].expand(3, model.config.num_key_value_heads, 2, model.config.head_dim)
    for layer in range(model.config.num_hidden_layers):
        cache.update(layer, k, k)
    cache.advance([2, 2, 2])
    cache.evict(0, 1, [0])
    cache.reorder([1, 1, 0])
    assert cache.read(0, 0)[0][0, 0, 0] == 1 and cache.read(0, 1)[0][0, 0, 0] == 1 and cache.read(0, 2)[0][0, 0, 0] == 0
    assert cache.held_positions(0, 0).tolist() == [1] and cache.held_positions(0, 2).tolist() == [0, 1]
    with pytest.raises(ValueError):
        cache.reorder([0, 3, 1])


def test_too_many_beams_is_refused():
    with pytest.raises(InputError, match="from 1 to 16"):
        beam_search(tiny_model(), [1, 2], 17, 4)
