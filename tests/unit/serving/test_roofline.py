"""Roofline: FLOPs and bytes of a forward counted by hand on a tiny config and against the memory calculator's
parameter count; the peaks measured and cached per machine key; the scheduler's steps carry their counts."""

from __future__ import annotations

import json

import pytest

from inspector.engine.config import ModelConfig
from inspector.serving import roofline
from inspector.serving.memory import count_params, resolve_config
from inspector.serving.results import Peaks
from inspector.serving.roofline import cached_peaks, forward_cost, machine_key, measure_peaks

TINY = ModelConfig(vocab_size=10, hidden_size=4, intermediate_size=6, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=2, tie_word_embeddings=True)


def test_forward_cost_by_hand():
    # row 0: a prompt of 3 tokens; row 1: one decode token after 5 cached positions
    cost = forward_cost(TINY, [(3, 0), (1, 5)], elem_bytes=4)
    # per layer: q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate/up/down 3 x 4x6 = 120 weights; 4 new tokens, 2 layers
    linear = 2 * 120 * 2 * 4
    # causal pairs: row 0 = 1 + 2 + 3 = 6, row 1 = 5 + 1 = 6; QK and PV: 2 x 2 FLOPs x heads 2 x head_dim 2
    attention = 4 * 2 * 2 * 2 * (6 + 6)
    lm_head = 2 * 4 * 10 * 2  # one logits row per request
    assert cost.flops == linear + attention + lm_head == 2464
    # weights: embedding 40 (tied: it is the LM head) + 2 x (120 + two norms of 4) + final norm 4 = 300,
    # plus the 4 looked-up embedding rows of 4
    assert cost.weight_bytes == (300 + 16) * 4
    per_position = 2 * 2 * 1 * 2 * 4  # K and V x layers x kv heads x head_dim x fp32
    assert cost.kv_read_bytes == (3 + 0 + 1 + 5) * per_position
    assert cost.kv_write_bytes == 4 * per_position
    assert cost.bytes_moved == 1264 + 288 + 128
    assert forward_cost(TINY, [], 4).flops == 0


def test_untied_head_reads_the_head_and_only_the_rows_of_the_embedding():
    from dataclasses import replace

    untied = replace(TINY, tie_word_embeddings=False)
    assert count_params(untied) == count_params(TINY) + 40
    assert forward_cost(untied, [(3, 0)], 2).weight_bytes == forward_cost(TINY, [(3, 0)], 2).weight_bytes


def test_one_token_is_two_flops_per_matrix_weight_of_the_memory_calculator():
    cfg = resolve_config("SmolLM2-135M").config
    L, D = cfg.num_hidden_layers, cfg.hidden_size
    matrix_params = count_params(cfg) - (2 * L + 1) * D  # everything but the RMSNorm weights; tied head counted once
    attention_one_pair = 4 * cfg.num_attention_heads * cfg.head_dim * L
    cost = forward_cost(cfg, [(1, 0)], elem_bytes=4)
    assert cost.flops == 2 * matrix_params + attention_one_pair
    assert cost.weight_bytes == 4 * (count_params(cfg) + D)
    # decode at batch 1 reads ~4 bytes per 2 FLOPs: memory bound; a long prefill is far more intense
    assert cost.intensity < 1 < forward_cost(cfg, [(512, 0)], 4).intensity / 100


def test_batching_raises_intensity_at_the_same_weights():
    cfg = resolve_config("SmolLM2-135M").config
    one, eight = forward_cost(cfg, [(1, 64)], 4), forward_cost(cfg, [(1, 64)] * 8, 4)
    assert eight.weight_bytes == one.weight_bytes + 7 * cfg.hidden_size * 4  # weights are read once per forward
    assert eight.intensity > 5 * one.intensity


def test_peaks_measured_and_cached_by_machine_key(tmp_path, monkeypatch):
    peaks = cached_peaks(tmp_path, matmul_n=64, read_mib=4, repeats=2)
    assert peaks.gflops_per_s > 0 and peaks.gb_per_s > 0 and peaks.key == machine_key(__import__("torch").float32)
    stored = json.loads((tmp_path / roofline.PEAKS_FILE).read_text())
    assert stored[peaks.key]["gb_per_s"] == pytest.approx(peaks.gb_per_s)

    def no_measure(*a, **k):
        raise AssertionError("measured again although cached")

    monkeypatch.setattr(roofline, "measure_peaks", no_measure)
    again = cached_peaks(tmp_path)
    assert (again.gflops_per_s, again.gb_per_s) == (peaks.gflops_per_s, peaks.gb_per_s)
    # another thread count is another machine key: measured
    monkeypatch.setattr(roofline, "machine_key", lambda *a: "other")
    with pytest.raises(AssertionError, match="measured again"):
        cached_peaks(tmp_path)


def test_a_damaged_cache_file_is_measured_over(tmp_path):
    (tmp_path / roofline.PEAKS_FILE).write_text("{not json")
    peaks = cached_peaks(tmp_path, matmul_n=32, read_mib=1, repeats=1)
    assert isinstance(peaks, Peaks) and json.loads((tmp_path / roofline.PEAKS_FILE).read_text())


def test_measure_peaks_in_bf16():
    import torch

    p = measure_peaks(torch.bfloat16, matmul_n=64, read_mib=2, repeats=1)
    assert p.dtype == "bfloat16" and p.ridge > 0


def test_scheduler_steps_carry_their_forward_cost(tmp_path_factory):
    from inspector.models.loader import load_model
    from inspector.serving.paged_cache import PagedKVCache
    from inspector.serving.scheduler import Scheduler
    from tests.support.tiny import make_tiny_checkpoint

    loaded = load_model(str(make_tiny_checkpoint(tmp_path_factory.mktemp("roof") / "m")))
    sched = Scheduler(loaded.model, PagedKVCache(loaded.config, 16, 4), max_batch=2)
    sched.add([5, 9, 23, 40, 7], 3)
    sched.add([11, 3], 3, arrival_step=1)
    sched.step_until_done()
    first, second = sched.records[:2]
    assert [(r.num_tokens, r.context) for r in first.rows] == [(5, 0)]
    assert [(r.kind, r.num_tokens, r.context) for r in second.rows] == [("decode", 1, 5), ("prefill", 2, 0)]
    assert second.flops == forward_cost(loaded.config, [(1, 5), (2, 0)], 4).flops
    assert second.bytes_moved == forward_cost(loaded.config, [(1, 5), (2, 0)], 4).bytes_moved
    assert all(r.forward_ms > 0 and 0 < r.gflops_per_s and 0 < r.gb_per_s for r in sched.records)
    assert first.intensity > sched.records[-1].intensity  # a 5-token prefill vs a lone decode row


def test_refresh_keeps_the_higher_of_each_roof(tmp_path, monkeypatch):
    key = machine_key(__import__("torch").float32)
    (tmp_path / roofline.PEAKS_FILE).write_text(json.dumps({key: {"gflops_per_s": 50.0, "gb_per_s": 5.0,
                                                                  "dtype": "float32"}}))
    monkeypatch.setattr(roofline, "measure_peaks", lambda *a, **k: Peaks(40.0, 9.0, "float32", key))
    assert cached_peaks(tmp_path).gflops_per_s == 50.0  # no refresh: the stored entry
    again = cached_peaks(tmp_path, refresh=True)  # a busier run measured less compute, more bandwidth
    assert (again.gflops_per_s, again.gb_per_s) == (50.0, 9.0)
    assert json.loads((tmp_path / roofline.PEAKS_FILE).read_text())[key]["gb_per_s"] == 9.0
