"""Bad mixture-of-experts input gets one clear line, and what the engine builds is what a config says.

- top-k larger than the expert count (or below 1) is refused in one line naming both numbers;
- keys whose math the engine does not implement are refused naming the key: Qwen3-MoE's dense layers
  (decoder_sparse_step, mlp_only_layers) and sliding window, OLMoE's clip_qkv and a head_dim its q/k norms
  cannot have;
- a checkpoint with an expert tensor missing, or one of the wrong shape, names that tensor;
- each family's config reads back equal from its `to_hf()` (what trace files store);
- the tensor inventory puts routers and experts in groups of their own.
"""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

from inspector.engine.config import ModelConfig
from inspector.errors import ModelLoadError, UnsupportedConfigError
from tests.support.tiny import make_tiny_checkpoint, tiny_moe_dir  # noqa: F401

BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


def one_line_error(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


@pytest.mark.parametrize("model_type,key", [("mixtral", "num_local_experts"), ("qwen3_moe", "num_experts"),
                                            ("olmoe", "num_experts"), ("granitemoe", "num_local_experts")])
def test_top_k_past_the_expert_count_is_refused_in_one_line(model_type, key):
    with pytest.raises(UnsupportedConfigError) as exc:
        ModelConfig.from_hf({**BASE, "model_type": model_type, key: 3, "num_experts_per_tok": 4})
    text = one_line_error(exc)
    assert "num_experts_per_tok=4" in text and "3 experts" in text
    with pytest.raises(UnsupportedConfigError) as exc:
        ModelConfig.from_hf({**BASE, "model_type": model_type, key: 3, "num_experts_per_tok": 0})
    assert "num_experts_per_tok=0" in one_line_error(exc)


def test_the_loader_refuses_it_before_reading_weights(tmp_path, tiny_moe_dir):  # noqa: F811
    import shutil

    from inspector.models.loader import load_model

    bad = tmp_path / "bad"
    shutil.copytree(tiny_moe_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "num_experts_per_tok": 6}))
    with pytest.raises(UnsupportedConfigError) as exc:
        load_model(str(bad))
    assert "num_experts_per_tok=6" in one_line_error(exc) and "5 experts" in str(exc.value)


@pytest.mark.parametrize("model_type,extra,key", [
    ("qwen3_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ("qwen3_moe", {"mlp_only_layers": [1]}, "mlp_only_layers"),
    ("qwen3_moe", {"use_sliding_window": True, "sliding_window": 8}, "use_sliding_window"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
    ("olmoe", {"head_dim": 32}, "head_dim"),
    ("granitemoe", {"attention_bias": True}, "attention_bias"),
    ("granitemoe", {"logits_scaling": 0}, "logits_scaling"),
])
def test_keys_whose_math_is_not_implemented_are_named(model_type, extra, key):
    experts = "num_local_experts" if model_type in ("mixtral", "granitemoe") else "num_experts"
    with pytest.raises(UnsupportedConfigError) as exc:
        ModelConfig.from_hf({**BASE, "model_type": model_type, experts: 4, "num_experts_per_tok": 2, **extra})
    assert f"{key}=" in one_line_error(exc)


def rewrite(directory, change) -> None:
    """Apply `change(state)` to the checkpoint's one safetensors file."""
    path = directory / "model.safetensors"
    state = load_file(str(path))
    change(state)
    save_file(state, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("model_type,tensor", [
    ("mixtral", "model.layers.1.block_sparse_moe.experts.2.w3.weight"),
    ("qwen3_moe", "model.layers.0.mlp.experts.4.down_proj.weight"),
    ("granitemoe", "model.layers.1.block_sparse_moe.output_linear.weight"),
    ("olmoe", "model.layers.0.mlp.gate.weight"),
])
def test_a_missing_or_misshaped_expert_tensor_is_named(model_type, tensor, tmp_path):
    from inspector.models.loader import load_model

    experts = "num_local_experts" if model_type in ("mixtral", "granitemoe") else "num_experts"
    kw = {experts: 5, "num_experts_per_tok": 2}
    if model_type == "qwen3_moe":
        kw["moe_intermediate_size"] = 32
    missing = make_tiny_checkpoint(tmp_path / "missing", model_type=model_type, tie=False, **kw)
    rewrite(missing, lambda state: state.pop(tensor))
    with pytest.raises(ModelLoadError) as exc:
        load_model(str(missing))
    assert tensor in one_line_error(exc) and "missing" in str(exc.value)

    shaped = make_tiny_checkpoint(tmp_path / "shaped", model_type=model_type, tie=False, **kw)
    rewrite(shaped, lambda state: state.__setitem__(tensor, state[tensor][..., :-1].contiguous()))
    with pytest.raises(ModelLoadError) as exc:
        load_model(str(shaped))
    assert tensor in one_line_error(exc) and "shape" in str(exc.value)


@pytest.mark.parametrize("raw", [
    {"model_type": "mixtral", "num_local_experts": 7, "num_experts_per_tok": 3, "sliding_window": 16},
    {"model_type": "qwen3_moe", "num_experts": 9, "num_experts_per_tok": 4, "moe_intermediate_size": 40,
     "norm_topk_prob": True, "head_dim": 32},
    {"model_type": "olmoe", "num_experts": 6, "num_experts_per_tok": 1, "norm_topk_prob": False},
    {"model_type": "granitemoe", "num_local_experts": 3, "num_experts_per_tok": 2, "embedding_multiplier": 12.0,
     "residual_multiplier": 0.22, "attention_multiplier": 0.015625, "logits_scaling": 6.0},
])
def test_each_family_reads_back_from_to_hf(raw):
    cfg = ModelConfig.from_hf({**BASE, **raw})
    assert cfg.moe and ModelConfig.from_hf(cfg.to_hf()) == cfg
    assert (cfg.num_experts, cfg.num_experts_per_tok) == (raw.get("num_experts", raw.get("num_local_experts")),
                                                         raw["num_experts_per_tok"])


def test_granite_scales_its_scores_by_the_attention_multiplier_alone():
    """transformers' Granite scores q.k times attention_multiplier (default 1.0), never head_dim^-1/2."""
    plain = ModelConfig.from_hf({**BASE, "model_type": "granitemoe", "num_local_experts": 4, "num_experts_per_tok": 2})
    assert plain.attn_scale == 1.0
    scaled = ModelConfig.from_hf({**BASE, "model_type": "granitemoe", "num_local_experts": 4,
                                  "num_experts_per_tok": 2, "attention_multiplier": 0.03})
    assert scaled.attn_scale == 0.03
    mixtral = ModelConfig.from_hf({**BASE, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2})
    assert mixtral.attn_scale == 16 ** -0.5  # head_dim 64 / 4


def test_a_mixture_of_experts_needs_its_expert_counts():
    with pytest.raises(UnsupportedConfigError) as exc:
        ModelConfig.from_hf({**BASE, "model_type": "mixtral", "num_experts_per_tok": 2})
    assert "num_local_experts=None" in one_line_error(exc)
    with pytest.raises(UnsupportedConfigError) as exc:
        ModelConfig.from_hf({**BASE, "model_type": "olmoe", "num_experts": 4})
    assert "num_experts_per_tok=None" in one_line_error(exc)
    # either name of the count is read (transformers writes num_local_experts for Qwen3-MoE, the Hub num_experts)
    for key in ("num_experts", "num_local_experts"):
        assert ModelConfig.from_hf({**BASE, "model_type": "qwen3_moe", key: 6, "num_experts_per_tok": 2}).num_experts == 6


def test_the_inventory_groups_routers_and_experts(tiny_moe_dir):  # noqa: F811
    from inspector.models.inventory import build_inventory, is_expert_group
    from inspector.models.loader import load_model

    loaded = load_model(str(tiny_moe_dir))
    inv = build_inventory(loaded)
    groups = {g.group: g for g in inv.groups}
    cfg = loaded.config
    L, E = cfg.num_hidden_layers, cfg.num_experts
    for name in ("expert gate", "expert up", "expert down"):
        assert groups[name].tensors == L * E
    assert groups["router"].tensors == L and groups["router"].params == L * E * cfg.hidden_size
    experts = [e for e in inv.entries if is_expert_group(e.group)]
    assert sorted({e.expert for e in experts}) == list(range(E))
    assert all(e.expert is None for e in inv.entries if not is_expert_group(e.group))
    assert sum(g.params for g in inv.groups) == inv.params == sum(p.numel() for p in loaded.model.parameters())
    info = inv.to_json()["tensors"]
    assert all(("expert" in t) == is_expert_group(t["group"]) for t in info)
