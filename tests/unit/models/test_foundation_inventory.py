"""Tensor inventory: names, groups, totals, the tied LM head; and the real default model's numbers."""

from __future__ import annotations

import pytest
from tests.support.tiny import tiny_llama_dir, tiny_qwen_dir  # noqa: F401  (fixtures)

from inspector.models.inventory import EXPERT_GROUPS, GROUPS, build_inventory, group_of
from inspector.models.loader import load_model


def test_group_of():
    assert group_of("model.embed_tokens.weight") == "embedding"
    assert group_of("model.layers.11.self_attn.k_proj.bias") == "attention k"
    assert group_of("model.layers.0.mlp.down_proj.weight") == "mlp down"
    assert group_of("model.layers.0.post_attention_layernorm.weight") == "norm"
    assert group_of("model.norm.weight") == "norm"
    assert group_of("lm_head.weight") == "lm_head"
    assert group_of("model.layers.0.block_sparse_moe.gate.weight") == "router"  # a mixture of experts' (Mixtral)
    with pytest.raises(ValueError):
        group_of("model.layers.0.mlp.shared_expert_gate.weight")


def test_tiny_tied(tiny_llama_dir):
    m = load_model(tiny_llama_dir)
    inv = build_inventory(m)
    state = m.model.state_dict()
    assert [e.name for e in inv.entries] == list(state)
    assert inv.params == sum(t.numel() for t in state.values())
    assert inv.bytes == 4 * inv.params
    assert inv.tied_to == "model.embed_tokens.weight"
    groups = {g.group: g for g in inv.groups}
    assert list(groups) == [g for g in GROUPS if g not in ("attention qkv", "mlp gate+up", "router", *EXPERT_GROUPS)]
    # (not Phi-3's fused ones, nor a mixture of experts')
    assert groups["lm_head"].tensors == 0 and groups["lm_head"].bytes == 0
    assert groups["norm"].tensors == 2 * 2 + 1
    assert sum(g.params for g in inv.groups) == inv.params
    q = next(e for e in inv.entries if e.name == "model.layers.1.self_attn.q_proj.weight")
    assert (q.shape, q.dtype, q.params, q.bytes, q.layer) == ((64, 64), "float32", 4096, 16384, 1)
    rows = inv.rows()
    assert len(rows) == len(inv.entries) + 1 and rows[-1][0] == "lm_head.weight" and rows[-1][4] == 0


def test_tiny_untied_qwen_biases(tiny_qwen_dir):
    m = load_model(tiny_qwen_dir)
    inv = build_inventory(m)
    groups = {g.group: g for g in inv.groups}
    assert inv.tied_to is None
    assert groups["lm_head"].tensors == 1 and groups["lm_head"].params == m.config.vocab_size * m.config.hidden_size
    assert groups["attention q"].tensors == 2 * 2  # weight + bias per layer
    assert groups["attention o"].tensors == 2
    assert len(inv.rows()) == len(inv.entries)
    js = inv.to_json()
    assert js["tensors"][0] == {"name": "model.embed_tokens.weight", "shape": [m.config.vocab_size, 64],
                                "dtype": "float32", "params": m.config.vocab_size * 64,
                                "bytes": m.config.vocab_size * 256, "group": "embedding", "layer": None}


def test_bf16_bytes(tiny_llama_dir):
    import torch

    inv = build_inventory(load_model(tiny_llama_dir, dtype=torch.bfloat16))
    assert inv.bytes == 2 * inv.params and {e.dtype for e in inv.entries} == {"bfloat16"}


@pytest.mark.slow
def test_default_model_inventory(default_model):
    inv = build_inventory(default_model)
    assert len(inv.entries) == 272
    assert inv.params == 134_515_008
    assert inv.bytes == 4 * 134_515_008
    assert (inv.source_format, inv.source_bytes) == ("GGUF Q4_1", 98_362_432)
    groups = {g.group: (g.tensors, g.params) for g in inv.groups}
    assert groups["embedding"] == (1, 49152 * 576)
    assert groups["attention q"] == (30, 30 * 576 * 576)
    assert groups["attention k"] == (30, 30 * 192 * 576)
    assert groups["mlp down"] == (30, 30 * 576 * 1536)
    assert groups["norm"] == (61, 61 * 576)
    assert groups["lm_head"] == (0, 0) and inv.tied_to == "model.embed_tokens.weight"
