"""Per-operation timing: the timer splits a forward into each layer's operations, in order, whose times add
up to the forward's, and each operation's bytes are what it reads (weights from the model's own tensors)."""

from __future__ import annotations

import time

import pytest

from inspector.engine import steps as engine
from inspector.engine.optiming import OPS, OpTimer, op_table, totals
from tests.support.engine_fixtures import hf_pair

LAYER_OPS = ["norms", "qkv", "rope (q/k norms)", "attention", "o (post-norm)", "residual adds", "norms", "gate/up",
             "activation", "down (post-norm)", "residual adds"]


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_operations_in_order_and_times_add_up(family):
    extra = dict(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, pad_token_id=0) if family != "llama" else {}
    _, model, cfg = hf_pair(family, layout="decode", **extra)
    cache = engine.new_cache(model)
    engine.prefill(model, list(range(3, 30)), cache)
    timer = OpTimer()
    timer.start()
    t0 = time.perf_counter()
    engine.decode_step(model, 5, cache, timer)
    wall = time.perf_counter() - t0
    rows = op_table(cfg, timer, 1, 27, 4, sampling_s=0.001)
    assert [(r.layer, r.op) for r in rows] == [(None, "embedding")] + [
        (i, op) for i in range(cfg.num_hidden_layers) for op in LAYER_OPS] + [(None, "final norm"), (None, "LM head"),
                                                                             (None, "sampling")]
    assert all(r.seconds >= 0 for r in rows)
    assert sum(r.seconds for r in rows[:-1]) <= wall
    assert sum(r.seconds for r in rows[:-1]) >= 0.5 * wall  # the marks cover the forward
    attn = model.model.layers[0].self_attn
    qkv = sum(getattr(attn, n).weight.nbytes for n in ("q_proj", "k_proj", "v_proj"))
    assert rows[2].bytes_read == qkv + cfg.hidden_size * 4
    lm = next(r for r in rows if r.op == "LM head")
    assert lm.bytes_read == model.unembed_weight.nbytes + cfg.hidden_size * 4 and lm.flops == 2 * model.unembed_weight.numel()
    summed = totals(rows)
    assert [r.op for r in summed] == [op for op in OPS]
    assert next(r for r in summed if r.op == "qkv").bytes_read == cfg.num_hidden_layers * rows[2].bytes_read
