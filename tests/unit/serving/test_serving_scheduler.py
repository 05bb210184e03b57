"""Continuous batching: every request's greedy tokens equal its solo run (also across preemption and
chunked prefill), admission order, EOS / max-token exit, refusal of one request alone, determinism."""

from __future__ import annotations

import dataclasses

import pytest

from inspector.serving.paged_cache import PagedKVCache
from inspector.serving.scheduler import Scheduler, Status
from tests.support.serving import solo_greedy, tiny_loaded  # noqa: F401 (fixture)


# (prompt ids, max new tokens, arrival step)
REQUESTS = [
    ([5, 9, 23, 40, 7], 6, 0),
    ([11, 3], 8, 0),
    (list(range(30, 51)), 5, 1),
    ([100, 101, 102, 103, 104, 105, 106, 107], 7, 2),
    ([60, 61, 62], 4, 6),
]


@pytest.fixture(scope="module")
def solo(tiny_loaded):
    return [solo_greedy(tiny_loaded.model, p, n) for p, n, _ in REQUESTS]


def simulate(loaded, num_blocks=64, block_size=4, max_batch=4, eos=(), prefill_chunk=None, requests=REQUESTS):
    cache = PagedKVCache(loaded.config, num_blocks, block_size)
    sched = Scheduler(loaded.model, cache, max_batch=max_batch, eos_ids=eos, prefill_chunk=prefill_chunk)
    for prompt, n, arrival in requests:
        sched.add(prompt, n, arrival)
    sched.step_until_done(max_steps=500)
    return sched


def test_every_request_equals_its_solo_run(tiny_loaded, solo):
    sched = simulate(tiny_loaded)
    assert sched.done and not any(r.preempted for r in sched.records)
    for seq, want in zip(sched.requests, solo):
        assert seq.output_ids == want
        assert seq.status is Status.FINISHED and seq.finish_reason == "max_tokens"
    assert sched.cache.manager.num_used == 0  # every block freed on finish
    # prefill rides in the same forward as decode rows
    assert any({r.kind for r in rec.rows} == {"prefill", "decode"} for rec in sched.records)
    assert max(len(rec.rows) for rec in sched.records) > 1


def test_preemption_recomputes_and_keeps_the_tokens(tiny_loaded, solo):
    # 12 blocks of 4 = 48 positions: request 2 alone needs 26, so the others cannot all keep theirs
    sched = simulate(tiny_loaded, num_blocks=12, max_batch=5)
    preempted = [s for rec in sched.records for s in rec.preempted]
    assert preempted, "this pool is meant to force a preemption"
    assert all(rec.blocks_used <= 12 for rec in sched.records)
    for seq, want in zip(sched.requests, solo):
        assert seq.output_ids == want
    # the newest running request is the one preempted
    for rec_before, rec in zip(sched.records, sched.records[1:]):
        for victim in rec.preempted:
            running_before = [r.request_id for r in rec_before.rows if r.request_id not in rec_before.finished]
            assert victim == max(running_before, key=lambda s: admitted_step(sched, s, rec.step))


def admitted_step(sched, request_id: int, before: int) -> int:
    return max(rec.step for rec in sched.records if request_id in rec.admitted and rec.step < before)


def test_chunked_prefill_gives_the_same_tokens(tiny_loaded, solo):
    sched = simulate(tiny_loaded, prefill_chunk=4)
    for seq, want in zip(sched.requests, solo):
        assert seq.output_ids == want
    assert all(r.num_tokens <= 4 for rec in sched.records for r in rec.rows)


def test_admission_order_and_arrival(tiny_loaded):
    sched = simulate(tiny_loaded, max_batch=2)
    admitted = [s for rec in sched.records for s in rec.admitted]
    assert admitted == [0, 1, 2, 3, 4]
    first_step = {s: rec.step for rec in sched.records for s in rec.admitted}
    for request_id, (_, _, arrival) in enumerate(REQUESTS):
        assert first_step[request_id] >= arrival
    assert all(len(rec.rows) <= 2 for rec in sched.records)
    assert first_step[0] == first_step[1] == 0 and 1 in sched.records[0].admitted


def test_eos_and_max_tokens_exit(tiny_loaded, solo):
    eos = solo[0][2]  # request 0's third token
    assert eos not in solo[0][:2]
    sched = simulate(tiny_loaded, eos=[eos])
    for seq, (prompt, n, _) in zip(sched.requests, REQUESTS):
        want = solo_greedy(tiny_loaded.model, prompt, n, frozenset([eos]))
        assert seq.output_ids == want
        if eos in want:
            assert seq.finish_reason == "eos" and seq.output_ids[-1] == eos and eos not in seq.output_ids[:-1]
        else:
            assert seq.finish_reason == "max_tokens" and len(seq.output_ids) == n
    assert sched.requests[0].finish_reason == "eos" and len(sched.requests[0].output_ids) == 3


def test_a_request_that_cannot_fit_is_refused_alone(tiny_loaded, solo):
    too_long = ([7] * 40, 20, 0)  # 60 positions; the pool holds 12 x 4 = 48
    sched = simulate(tiny_loaded, num_blocks=12, requests=[REQUESTS[0], too_long, REQUESTS[1]])
    assert sched.requests[1].status is Status.REFUSED and "48" in sched.requests[1].finish_reason
    assert sched.requests[0].output_ids == solo[0] and sched.requests[2].output_ids == solo[1]


def test_deterministic(tiny_loaded):
    def strip(rec):
        return dataclasses.replace(rec, elapsed_ms=0.0, forward_ms=0.0)

    a, b = simulate(tiny_loaded, num_blocks=12, max_batch=5), simulate(tiny_loaded, num_blocks=12, max_batch=5)
    assert [strip(r) for r in a.records] == [strip(r) for r in b.records]
    assert [s.output_ids for s in a.requests] == [s.output_ids for s in b.requests]
    assert all(s.ttft_ms is not None and s.ttft_ms >= 0 for s in a.requests)


# ---- `inspector serve-sim` (through its own parser: cli.main maps InputError to one line and exit 1)

def serve_sim(argv: list[str]):
    import argparse

    from inspector.commands import serve_sim as cmd

    parser = argparse.ArgumentParser(prog="inspector")
    cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve-sim", *argv])
    return cmd.simulate(args)


def test_serve_sim_json(tiny_loaded, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The quick brown fox\n\nHello world!\n" + "Attention is all you need; " * 8 + "\n")
    out = serve_sim(["--prompts", str(prompts), "--model", str(tiny_loaded.weights_path), "--max-batch", "2",
                     "--block-size", "4", "--blocks", "8", "--max-new-tokens", "5", "--json"])
    reqs = out["requests"]
    assert [r["prompt"] for r in reqs] == ["The quick brown fox", "Hello world!", "Attention is all you need; " * 8]
    tok = tiny_loaded.tokenizer
    for r in reqs[:2]:
        assert r["generated_ids"] == solo_greedy(tiny_loaded.model, tok.encode(r["prompt"]), 5,
                                                 frozenset([tok.eos_id, *tiny_loaded.config.eos_token_ids]))
        assert r["text"] == tok.decode(r["generated_ids"]) and r["ttft_ms"] > 0
    assert reqs[2]["generated_ids"] == [] and "32" in reqs[2]["finish_reason"]  # refused alone: 8 x 4 positions
    assert all(len(s["rows"]) <= 2 and s["blocks_used"] <= 8 for s in out["steps"])
    assert out["throughput"]["generated_tokens"] == sum(len(r["generated_ids"]) for r in reqs)
    assert set(out["steps"][0]) >= {"rows", "blocks_used", "paged_bytes", "contiguous_bytes"}
    assert out["memory"]["peak_paged_bytes"] <= out["memory"]["peak_contiguous_bytes"]


@pytest.mark.parametrize("argv, message", [  # each flag's own range is a usage error (test_fuzz_cli.py)
    (["--max-batch", "4", "--blocks", "2"], "a batch of 4 needs at least 4 blocks"),
])
def test_serve_sim_bad_settings(tmp_path, argv, message):
    from inspector.errors import InputError

    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    with pytest.raises(InputError, match=message):
        serve_sim(["--prompts", str(prompts), *argv])


def test_serve_sim_bad_prompts_file(tmp_path):
    from inspector.errors import InputError

    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(InputError, match="holds no prompt"):
        serve_sim(["--prompts", str(empty)])
    with pytest.raises(InputError, match="cannot read --prompts"):
        serve_sim(["--prompts", str(tmp_path / "missing.txt")])


def test_serve_sim_refuses_a_pool_larger_than_memory(tiny_loaded, tmp_path):
    from inspector.errors import InputError

    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    with pytest.raises(InputError, match="are free"):
        serve_sim(["--prompts", str(prompts), "--model", str(tiny_loaded.weights_path), "--blocks", str(10 ** 12)])
    out = serve_sim(["--prompts", str(prompts), "--model", str(tiny_loaded.weights_path), "--max-new-tokens",
                     str(10 ** 9), "--json"])  # the default pool stops at the model's context; the request is refused
    assert out["requests"][0]["generated_ids"] == [] and "context" in out["requests"][0]["finish_reason"]


def test_serve_sim_chat_wraps_each_prompt(tiny_loaded, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\nhello\n")
    out = serve_sim(["--prompts", str(prompts), "--model", str(tiny_loaded.weights_path), "--chat",
                     "--max-new-tokens", "2", "--json"])
    tok = tiny_loaded.tokenizer
    for r in out["requests"]:
        assert r["prompt_ids"] == tok.encode(tok.render_chat(r["prompt"]))
        assert r["prompt_ids"][0] == tok.bos_id  # <|im_start|> opens the template


def test_serve_sim_through_the_cli_errors_in_one_line(tmp_path, capsys):
    from inspector.commands.cli import main

    assert main(["serve-sim", "--prompts", str(tmp_path / "missing.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read --prompts") and err.count("\n") == 1


def test_serve_sim_arrivals_parallel_samples_and_roofline(tiny_loaded, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The quick brown fox\nHello world!\nOnce upon a time\n")
    base = ["--prompts", str(prompts), "--model", str(tiny_loaded.weights_path), "--max-new-tokens", "4", "--json"]
    out = serve_sim([*base, "--arrivals", "0,2,5"])
    first_step = {s: st["step"] for st in out["steps"] for s in st["admitted"]}
    assert [r["arrival_step"] for r in out["requests"]] == [0, 2, 5]
    assert [first_step[i] for i in range(3)] == [0, 2, 5]  # a free batch admits each the step it arrives
    lens = [len(r["prompt_ids"]) for r in out["requests"]]
    assert out["steps"][3]["rows"] == [  # context: the positions cached before this step's token
        {"request": 0, "kind": "decode", "tokens": 1, "context": lens[0] + 2},
        {"request": 1, "kind": "decode", "tokens": 1, "context": lens[1]}]
    assert all(st["flops"] > 0 and st["gb_per_s"] > 0 for st in out["steps"] if st["rows"])
    assert out["peaks"]["gflops_per_s"] > 0 and out["peaks"]["gb_per_s"] > 0
    every = serve_sim([*base, "--arrival-every", "3"])
    assert [r["arrival_step"] for r in every["requests"]] == [0, 3, 6]

    sampled = serve_sim([*base, "--n", "2", "--temperature", "1.0", "--seed", "5"])
    reqs = sampled["requests"]
    assert len(reqs) == 6 and [(r["prompt_index"], r["sample"]) for r in reqs[:2]] == [(0, 0), (0, 1)]
    assert reqs[0]["prompt"] == reqs[1]["prompt"] and all(len(r["generated_ids"]) for r in reqs)
    assert [st["rows"] for st in sampled["steps"]][0] == [
        {"request": i, "kind": "prefill", "tokens": len(reqs[i]["prompt_ids"]), "context": 0} for i in (0, 2, 4)]
    assert serve_sim([*base, "--n", "2", "--temperature", "1.0", "--seed", "5"])["requests"][1]["generated_ids"] == \
        reqs[1]["generated_ids"]  # deterministic given the seed


@pytest.mark.parametrize("argv, message", [  # limits between flags (each flag's own range is a usage error)
    (["--arrivals", "0,1"], "one step per prompt \\(3\\), got 2"),
    (["--n", "4", "--max-batch", "2"], "--max-batch must be at least 4"),
])
def test_serve_sim_bad_arrivals_and_sampling(tmp_path, argv, message):
    from inspector.errors import InputError

    prompts = tmp_path / "p.txt"
    prompts.write_text("a\nb\nc\n")
    with pytest.raises(InputError, match=message):
        serve_sim(["--prompts", str(prompts), *argv])
