"""Parallel sampling through the scheduler: n continuations share the prompt's blocks (held once, reference
counts), copy the partial block on their first write, and each equals a solo run with its own seed stream."""

from __future__ import annotations

import pytest

from inspector.engine.config import SamplingParams
from inspector.engine.sampling import generator_for, sample
from inspector.engine.steps import decode_step, new_cache, prefill
from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.scheduler import Scheduler, Status

PROMPT = [5, 9, 23, 40, 7, 12]  # 6 tokens, blocks of 4: one full block and one partial
PARAMS = SamplingParams(temperature=1.0, top_k=20, top_p=0.95, seed=7)


@pytest.fixture(scope="module")
def tiny_loaded(tmp_path_factory):
    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_checkpoint

    return load_model(str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_parallel") / "m", tie=False)))


def solo_sampled(model, prompt: list[int], max_new: int, params: SamplingParams | None) -> list[int]:
    """One request alone on the contiguous cache; token at position p drawn with generator_for(seed, p)."""
    cache = new_cache(model)
    logits, out = prefill(model, prompt, cache), []
    while True:
        if params is None:
            out.append(int(logits.argmax()))
        else:
            out.append(sample(logits, params, generator_for(params.seed, len(prompt) + len(out))).token)
        if len(out) == max_new:
            return out
        logits = decode_step(model, out[-1], cache)


def scheduler(loaded, num_blocks: int = 32, max_batch: int = 4) -> Scheduler:
    return Scheduler(loaded.model, PagedKVCache(loaded.config, num_blocks, 4), max_batch=max_batch)


def test_prompt_blocks_are_held_once_and_the_partial_block_is_copied_on_write(tiny_loaded):
    sched = scheduler(tiny_loaded)
    first = sched.add(PROMPT, 6, n=3, params=PARAMS)
    group = sched.requests
    assert [s.request_id for s in group] == [0, 1, 2] and first is group[0]
    rec = sched.step()  # one prefill row for the whole group, then the forks
    assert [(r.request_id, r.kind, r.num_tokens) for r in rec.rows] == [(0, "prefill", 6)]
    assert sorted(rec.new_tokens) == [0, 1, 2]
    tables = [sched.cache.tables[s.request_id] for s in group]
    assert all(t.blocks == tables[0].blocks for t in tables) and len(tables[0].blocks) == 2
    assert [sched.cache.manager.ref_counts[b] for b in tables[0].blocks] == [3, 3]
    assert sched.cache.manager.num_used == 2  # the prompt's blocks are held once
    assert [s.parent for s in group] == [None, 0, 0]

    rec = sched.step()  # every continuation writes position 6, into the shared partial block
    assert [r.kind for r in rec.rows] == ["decode"] * 3
    full, partials = tables[0].blocks[0], [sched.cache.tables[s.request_id].blocks[1] for s in group]
    assert all(sched.cache.tables[s.request_id].blocks[0] == full for s in group)
    assert sched.cache.manager.ref_counts[full] == 3
    assert len(set(partials)) == 3 and all(sched.cache.manager.ref_counts[b] == 1 for b in partials)
    assert sched.cache.manager.num_used == 4  # one full block shared + three partial blocks
    sched.step_until_done()
    assert sched.cache.manager.num_used == 0


def test_each_continuation_equals_its_solo_run_with_its_seed_stream(tiny_loaded):
    sched = scheduler(tiny_loaded)
    sched.add(PROMPT, 8, n=3, params=PARAMS)
    sched.add([11, 3, 8], 5)  # a greedy request beside them
    sched.step_until_done()
    outs = [s.output_ids for s in sched.requests]
    for i in range(3):
        seeded = SamplingParams(PARAMS.temperature, PARAMS.top_k, PARAMS.top_p, seed=PARAMS.seed + i)
        assert sched.requests[i].params == seeded
        assert outs[i] == solo_sampled(tiny_loaded.model, PROMPT, 8, seeded)
    assert len({tuple(o) for o in outs[:3]}) > 1  # the seed streams differ
    assert outs[3] == solo_sampled(tiny_loaded.model, [11, 3, 8], 5, None)
    assert all(s.status is Status.FINISHED for s in sched.requests)


def test_greedy_is_the_default_and_survives_preemption(tiny_loaded):
    want = solo_sampled(tiny_loaded.model, PROMPT, 10, None)
    # 8 blocks of 4: two continuations of 16 positions each (plus the other request) cannot all stay
    sched = scheduler(tiny_loaded, num_blocks=8)
    sched.add(PROMPT, 10, n=2)
    sched.add([30, 31, 32, 33, 34], 9)
    sched.step_until_done()
    assert any(r.preempted for r in sched.records)
    assert [s.output_ids for s in sched.requests[:2]] == [want, want]
    assert sched.requests[2].output_ids == solo_sampled(tiny_loaded.model, [30, 31, 32, 33, 34], 9, None)


def test_more_continuations_than_the_batch_is_refused_alone(tiny_loaded):
    sched = scheduler(tiny_loaded, max_batch=2)
    sched.add(PROMPT, 3, n=3)
    sched.add([11, 3], 3)
    sched.step_until_done()
    assert [s.status for s in sched.requests] == [Status.REFUSED] * 3 + [Status.FINISHED]
    assert "3 continuations do not fit a batch of 2" in sched.requests[0].finish_reason


def test_a_group_waits_for_room_for_all_its_continuations(tiny_loaded):
    sched = scheduler(tiny_loaded, max_batch=3)
    sched.add([11, 3], 4)
    sched.add(PROMPT, 2, n=3)
    sched.step()
    assert [r.request_id for r in sched.records[0].rows] == [0]  # 1 running + 3 would pass the batch of 3
    sched.step_until_done()
    admitted = {s: rec.step for rec in sched.records for s in rec.admitted}
    finished_0 = next(rec.step for rec in sched.records if 0 in rec.finished)
    assert admitted[1] == finished_0 + 1  # admitted the step after the batch had room for all three
    assert all(len(rec.new_tokens) <= 3 for rec in sched.records)
    assert [len(s.output_ids) for s in sched.requests] == [4, 2, 2, 2]
