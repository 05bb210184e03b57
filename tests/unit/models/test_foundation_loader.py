"""Model sources and their error paths, on tiny checkpoints built by the test (no Hub, no default model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.support.tiny import tiny_llama_dir, tiny_qwen_dir  # noqa: F401  (fixtures)

from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.models.loader import load_model
from inspector.engine.model import Transformer


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_local_dir_loads_exact_weights(tiny_llama_dir):
    m = load_model(tiny_llama_dir)
    assert isinstance(m.model, Transformer)
    assert m.name == "tiny-llama" and m.source == str(tiny_llama_dir) and m.weights_path == tiny_llama_dir
    assert m.source_format == "safetensors fp32"
    assert m.source_bytes == (tiny_llama_dir / "model.safetensors").stat().st_size
    assert m.config.tie_word_embeddings and not hasattr(m.model, "lm_head")
    assert not m.model.training
    assert all(not p.requires_grad for p in m.model.parameters())
    file = load_file(str(tiny_llama_dir / "model.safetensors"))
    state = m.model.state_dict()
    assert state.keys() == file.keys()
    assert all(torch.equal(state[k], file[k]) for k in file)


def test_rope_buffer_is_computed_not_skipped(tiny_llama_dir):
    """Random init is skipped while building; RoPE's inv_freq buffer must still be real numbers."""
    m = load_model(tiny_llama_dir)
    inv = m.model.inv_freq
    assert inv.shape == (m.config.head_dim // 2,) and float(inv[0]) == 1.0 and torch.isfinite(inv).all()


def test_bf16_load_casts(tiny_llama_dir):
    m = load_model(tiny_llama_dir, dtype=torch.bfloat16)
    assert m.dtype == torch.bfloat16
    assert {p.dtype for p in m.model.parameters()} == {torch.bfloat16}


def test_qwen2_untied_with_biases(tiny_qwen_dir):
    m = load_model(tiny_qwen_dir)
    assert m.config.model_type == "qwen2" and not m.config.tie_word_embeddings
    state = m.model.state_dict()
    assert "lm_head.weight" in state and "model.layers.0.self_attn.q_proj.bias" in state
    assert "model.layers.0.self_attn.o_proj.bias" not in state
    file = load_file(str(tiny_qwen_dir / "model.safetensors"))
    assert all(torch.equal(state[k], file[k]) for k in file)


def test_sharded_checkpoint(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "sharded")
    full = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = sorted(full)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: full[k] for k in part}, str(d / fname))
        weight_map.update({k: fname for k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    m = load_model(d)
    state = m.model.state_dict()
    assert all(torch.equal(state[k], full[k]) for k in full)
    assert m.source_bytes == sum(p.stat().st_size for p in d.glob("*.safetensors"))


def test_tied_checkpoint_with_redundant_lm_head(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "dup-head")
    full = load_file(str(d / "model.safetensors"))
    full["lm_head.weight"] = full["model.embed_tokens.weight"].clone()
    save_file(full, str(d / "model.safetensors"))
    assert load_model(d).config.tie_word_embeddings


def test_missing_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="model source not found"):
        load_model(tmp_path / "does-not-exist")


def test_dir_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_truncated_safetensors(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "trunc")
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="truncated or corrupted safetensors") as exc:
        load_model(d)
    assert "\n" not in str(exc.value) and "model.safetensors" in str(exc.value)


def test_unsupported_rope_scaling(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "yarn")
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 10000.0
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedConfigError, match="rope_scaling.rope_type='yarn'"):
        load_model(d)


def test_bin_only_checkpoint_is_refused_unread(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "pickle")
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not even a pickle: must never be opened")
    with pytest.raises(ModelLoadError, match=r"only safetensors and GGUF are read; .* has only pytorch_model\.bin"):
        load_model(d)


def test_weights_that_do_not_match_config(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "mismatch")
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="missing .* model.layers.2"):
        load_model(d)


def test_missing_tokenizer(tiny_llama_dir, tmp_path):
    d = copy_dir(tiny_llama_dir, tmp_path / "notok")
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="no tokenizer.json"):
        load_model(d)


def fake_hub_cache(root: Path, repo_id: str, files_from: Path) -> Path:
    """The huggingface_hub cache layout: models--org--name/{refs/main, snapshots/<commit>/...}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    shutil.copytree(files_from, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    return cache


def test_hub_repo_id_loads_from_offline_cache(tiny_llama_dir, offline_hub):
    snap = fake_hub_cache(offline_hub, "tiny-org/tiny-llama", tiny_llama_dir)
    m = load_model("tiny-org/tiny-llama")
    assert m.source == "tiny-org/tiny-llama" and m.name == "tiny-llama"
    assert m.weights_path.resolve() == snap.resolve()
    file = load_file(str(tiny_llama_dir / "model.safetensors"))
    assert all(torch.equal(m.model.state_dict()[k], file[k]) for k in file)


def test_hub_repo_id_not_cached_offline(offline_hub):
    with pytest.raises(ModelLoadError, match="'nobody/nothing' is not a local path, and the Hugging Face Hub") as exc:
        load_model("nobody/nothing")
    assert "\n" not in str(exc.value)
