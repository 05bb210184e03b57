"""What a mixture of experts holds against what it reads: the calculator, the roofline, the per-operation
timing and the serving scheduler.

- The shipped MoE configs (sources in ../shared/MODEL_CONFIGS.md section 4): total and active parameters equal
  transformers' own classes built on the meta device from the same config (active: transformers' total
  minus (E - k)/E of its expert tensors), the counts section 4 computed, and the published totals within
  1 % where the publisher gives three significant digits (Granite's "1.3B" has two: within its rounding).
- `expected_experts` is E·(1 − (1 − k/E)^B): k at B = 1, E as B grows, section 4's worked values, and a
  simulation of uniform routing.
- `inspector memory --json`: params_total, params_active and the experts' costs; null experts for a dense model.
- The roofline's weight bytes count the experts a forward read; the op timing's "experts" rows too; the
  scheduler's steps carry the bytes of the experts their real tokens went to.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inspector.serving import experts as moe
from inspector.serving import memory as mem
from inspector.serving.roofline import forward_cost
from tests.support.tiny import tiny_moe_dir  # noqa: F401

# repo id -> (published total, published active, section 4's computed total and active in millions)
MOE = {
    "mistralai/Mixtral-8x7B-v0.1": (46.7e9, 12.9e9, 46_703, 12_880),
    "Qwen/Qwen3-30B-A3B": (30.5e9, 3.3e9, 30_532, 3_353),
    "allenai/OLMoE-1B-7B-0924": (6.9e9, 1.3e9, 6_919, 1_282),
    "ibm-granite/granite-3.0-1b-a400m-base": (1.3e9, 0.4e9, 1_335, 429),
}


def hf_counts(raw: dict) -> tuple[int, int]:
    """(total, active) parameters of transformers' model for `raw`, built on the meta device."""
    import transformers

    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "torch_dtype")}
    config = transformers.AutoConfig.for_model(raw["model_type"], **keys)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    E, k = config.num_local_experts, config.num_experts_per_tok
    return total, total - experts * (E - k) // E


@pytest.mark.parametrize("name", list(MOE))
def test_counts_equal_transformers_on_the_meta_device_and_the_published_totals(name):
    rc = mem.resolve_config(name)
    total, active = mem.count_params(rc.config), moe.count_active_params(rc.config)
    assert (total, active) == hf_counts(rc.shipped.config)
    published, published_active, s4_total, s4_active = MOE[name]
    assert (rc.shipped.published_params, rc.shipped.published_active) == (published, published_active)
    assert (round(total / 1e6), round(active / 1e6)) == (s4_total, s4_active)
    digits = len(rc.shipped.published_label.split("B")[0].replace(".", ""))  # "46.7B (...)" -> 3
    tolerance = 0.01 * published if digits >= 3 else 0.05e9  # "1.3B": half its last digit
    assert abs(total - published) <= tolerance, (total, published)
    assert active < total / 3  # every one of them reads under a third of its weights per token


def test_expected_experts_is_the_uniform_union():
    assert moe.expected_experts(8, 2, 1) == pytest.approx(2)
    assert moe.expected_experts(8, 2, 8) == pytest.approx(7.2, abs=0.05)  # section 4: Mixtral at B = 8
    assert moe.expected_experts(128, 8, 16) == pytest.approx(82, abs=0.5)  # Qwen3-30B-A3B at B = 16
    assert moe.expected_experts(128, 8, 64) == pytest.approx(126, abs=0.5)
    assert moe.expected_experts(32, 8, 1000) == pytest.approx(32)
    rng = np.random.default_rng(0)
    for E, k, B in ((8, 2, 4), (32, 8, 6), (64, 8, 20)):
        picks = np.argsort(rng.random((4000, B, E)), axis=-1)[..., :k]  # 4000 steps of B tokens, k distinct each
        simulated = np.mean([len(np.unique(step)) for step in picks])
        assert simulated == pytest.approx(moe.expected_experts(E, k, B), rel=0.01)


def test_memory_json_gives_total_active_and_the_experts_costs(capsys):
    from inspector.commands.cli import main

    assert main(["memory", "--config", "Qwen/Qwen3-30B-A3B", "--batch", "16", "--context", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rc = mem.resolve_config("Qwen/Qwen3-30B-A3B")
    costs = moe.expert_costs(rc.config, "bf16")
    assert out["params_total"] == out["params"] == mem.count_params(rc.config)
    assert out["params_active"] == moe.count_active_params(rc.config)
    assert out["published_active_params"] == 3.3e9
    e = out["experts"]
    assert (e["num_experts"], e["experts_per_token"]) == (128, 8)
    assert e["shared_params"] + e["expert_params"] == out["params_total"]
    assert e["params_per_expert"] == 3 * 2048 * 768
    assert e["active_weight_bytes"] == costs.shared_bytes + 48 * 8 * costs.bytes_per_expert
    assert e["batch_expected_experts"] == pytest.approx(moe.expected_experts(128, 8, 16))
    assert e["active_weight_bytes"] < e["batch_weight_bytes"] < out["weight_bytes"]
    assert main(["memory", "--config", "Qwen/Qwen3-30B-A3B", "--batch", "16", "--context", "4096"]) == 0
    text = capsys.readouterr().out
    assert "128 experts per layer, 8 per token" in text and "82.4 of 128" in text
    assert main(["memory", "--config", "meta-llama/Llama-3.1-8B", "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert dense["experts"] is None and dense["params_active"] == dense["params_total"] == dense["params"]


def test_the_roofline_counts_the_experts_a_forward_read():
    rc = mem.resolve_config("mistralai/Mixtral-8x7B-v0.1")
    cfg, costs = rc.config, moe.expert_costs(rc.config, "fp32")
    untied_table = cfg.vocab_size * cfg.hidden_size
    shared_read = costs.shared_params - untied_table  # an untied table: only the looked-up rows are read
    one = forward_cost(cfg, [(1, 100)], 2, experts_read=[2] * 32)
    assert one.weight_bytes == 2 * (shared_read + cfg.hidden_size + 32 * 2 * costs.params_per_expert)
    assert forward_cost(cfg, [(1, 100)], 2).weight_bytes == one.weight_bytes  # one token: exactly k, expected too
    batch = [(1, 100)] * 8
    measured = forward_cost(cfg, batch, 2, experts_read=[5] * 32)
    expected = forward_cost(cfg, batch, 2)  # uniform routing: 7.2 per layer
    assert measured.weight_bytes == 2 * (shared_read + 8 * cfg.hidden_size + 32 * 5 * costs.params_per_expert)
    uniform = 2 * (shared_read + 8 * cfg.hidden_size + 32 * moe.expected_experts(8, 2, 8) * costs.params_per_expert)
    assert abs(expected.weight_bytes - uniform) <= 4  # the expectation rounded to whole parameters
    assert measured.flops == expected.flops  # FLOPs: every token runs its k experts, however they overlap
    per_token = 4096 * (4096 + 2 * 1024 + 4096) + 4096 * 8 + 2 * 3 * 4096 * 14336
    assert one.flops == 2 * per_token * 32 + 4 * 32 * 128 * 32 * 101 + 2 * 4096 * 32000


def test_op_timing_counts_the_chosen_experts(tiny_moe_dir):  # noqa: F811
    from inspector.engine.config import SamplingParams
    from inspector.models.loader import load_model
    from inspector.session.op_timing import time_step_ops
    from inspector.session.session import Session

    loaded = load_model(str(tiny_moe_dir))
    cfg = loaded.config
    s = Session(loaded)
    s.prefill("The quick brown fox jumps over", SamplingParams(), max_new_tokens=4)
    s.step(SamplingParams())
    D, I, elem = cfg.hidden_size, cfg.expert_intermediate_size, 4
    for step, tokens in ((0, s.records[0].n_new), (1, 1)):
        timing = time_step_ops(s, step, repeats=1)
        ops = {r.op for r in timing.rows}
        assert {"router", "routing", "experts"} <= ops and not {"gate/up", "down (post-norm)"} & ops
        routing = s.records[step].routing
        for r in (r for r in timing.rows if r.op == "experts"):
            read = len(set(routing.expert_ids[r.layer].ravel().tolist()))
            assert r.bytes_read == read * 3 * D * I * elem + tokens * D * elem
            assert r.flops == 2 * 3 * D * I * cfg.num_experts_per_tok * tokens
        if step == 1:
            assert all(len(set(routing.expert_ids[i].ravel().tolist())) == 2 for i in range(cfg.num_hidden_layers))


def test_the_scheduler_counts_the_experts_its_batches_read(tiny_moe_dir):  # noqa: F811
    from inspector.models.loader import load_model
    from inspector.serving.paged_cache import PagedKVCache
    from inspector.serving.scheduler import Scheduler

    loaded = load_model(str(tiny_moe_dir), layout="batch")
    cfg = loaded.config
    sched = Scheduler(loaded.model, PagedKVCache(cfg, 64, 8), max_batch=4)
    tok = loaded.tokenizer
    for i, text in enumerate(["The quick brown fox", "Hello world", "def add(a, b):"]):
        sched.add(tok.encode(text), 5, i)
    records = sched.step_until_done()
    costs = moe.expert_costs(cfg, "fp32")
    L, k, E = cfg.num_hidden_layers, cfg.num_experts_per_tok, cfg.num_experts
    for rec in records:
        rows = [(r.num_tokens, r.context) for r in rec.rows]
        if not rows:
            continue
        low = forward_cost(cfg, rows, 4, experts_read=[k] * L).bytes_moved  # every token on the same k
        high = forward_cost(cfg, rows, 4, experts_read=[E] * L).bytes_moved
        assert low <= rec.bytes_moved <= high
        read = (rec.bytes_moved - low) // (4 * costs.params_per_expert)  # experts read beyond k per layer
        assert (rec.bytes_moved - low) % (4 * costs.params_per_expert) == 0 and 0 <= read <= (E - k) * L
        if len(rows) == 1 and rows[0][0] == 1:  # one decode token: exactly its k experts per layer
            assert rec.bytes_moved == low
    assert any(len(r.rows) > 1 for r in records)
