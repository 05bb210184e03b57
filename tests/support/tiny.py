"""Tiny random checkpoints for tests (`from tests.support.tiny import ...`; the fixtures imported explicitly).

`make_tiny_checkpoint(dir, model_type="llama", tie=True, init_std=None, **config_overrides) -> Path` (any
family in `HF_CLASSES`, the mixtures of experts included) writes a
real HF-format directory with transformers' `save_pretrained` (config.json, model.safetensors) plus a small
byte-level BPE tokenizer.json (SmolLM pre-tokenizer, ChatML special tokens) and a tokenizer_config.json
with a ChatML chat template. Same seed -> same weights: transformers' own initialisation, or with `init_std`
every matrix drawn N(0, init_std) (routers too, whose transformers init may be all zeros: every expert tied).
The files hold the checkpoint names the Hub's hold (transformers 5 writes MoE experts one tensor per expert
and projection, e.g. `mlp.experts.3.gate_proj.weight`, though its modules stack them).

`write_tiny_gguf(hf_dir, path, qtype="F32", add_bos=False)` writes that checkpoint as a llama GGUF the way llama.cpp's
converter does (`llama_cpp_permute`, copied from it): Q/K rows permuted, tokenizer vocab/merges/types in metadata; optionally Q8_0-quantized.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! Tokenizers split text into pieces, then ids.",
    "def add(a, b):\n    return a + b\n",
    "In 2024 there were 365 days, 12 months and 52 weeks.",
    "Attention is all you need; the cache grows by one position per token.",
    "Ünïcödé, emoji 🤖 and tabs\tare bytes too.",
] * 4


# model_type -> transformers' config and causal-LM class names (every family the engine implements)
HF_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
              "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
              "phi3": ("Phi3Config", "Phi3ForCausalLM"), "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
              "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
              "mixtral": ("MixtralConfig", "MixtralForCausalLM"), "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
              "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"), "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM")}


def make_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE with the SmolLM pre-tokenizer and ChatML specials at ids 0, 1, 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def make_tiny_checkpoint(directory: str | Path, model_type: str = "llama", tie: bool = True, seed: int = 0,
                         init_std: float | None = None, **config_overrides: Any) -> Path:
    """Write a tiny random HF checkpoint into `directory` (created) and return it."""
    import torch
    import transformers

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer()
    cfg: dict[str, Any] = dict(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2,
    )
    cfg.update(config_overrides)
    if model_type not in HF_CLASSES:
        raise ValueError(model_type)
    config = getattr(transformers, HF_CLASSES[model_type][0])(**cfg)
    model_cls = getattr(transformers, HF_CLASSES[model_type][1])
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():  # non-trivial norms and biases, so a mix-up would show
        for name, p in model.named_parameters():
            if init_std is not None:
                p.normal_(0.0, init_std)
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if name.endswith("norm.weight") else 0.1 * torch.randn_like(p))
    model.save_pretrained(directory, safe_serialization=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>", "add_prefix_space": False,
        "chat_template": CHATML_TEMPLATE,
    }, indent=2))
    return directory


def llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """Verbatim from llama.cpp convert_hf_to_gguf.py (LlamaModel.permute): the oracle for our inverse."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def _hf_to_gguf_name(name: str) -> str:
    from inspector.models.gguf_llama import BLOCK_NAMES, TOP_NAMES

    for gg, hf in TOP_NAMES.items():
        if name.startswith(hf + "."):
            return gg + name[len(hf):]
    parts = name.split(".")  # model.layers.N.<module path>.weight
    inverse = {hf: gg for gg, hf in BLOCK_NAMES.items()}
    return f"blk.{parts[2]}.{inverse['.'.join(parts[3:-1])]}.{parts[-1]}"


def write_tiny_gguf(hf_dir: str | Path, path: str | Path, qtype: str = "F32", pre: str = "smollm",
                    add_bos: bool = False) -> Path:
    """Write the HF checkpoint in `hf_dir` as a llama GGUF at `path`, permuting Q/K like llama.cpp."""
    import gguf
    from safetensors.numpy import load_file

    hf_dir, path = Path(hf_dir), Path(path)
    cfg = json.loads((hf_dir / "config.json").read_text())
    tok_json = json.loads((hf_dir / "tokenizer.json").read_text())
    tok_cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    state = load_file(str(hf_dir / "model.safetensors"))
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-test-llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == "F32" else gguf.LlamaFileType.MOSTLY_Q8_0)

    vocab = tok_json["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["id"] for a in tok_json["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[tok_cfg["bos_token"]])
    w.add_eos_token_id(vocab[tok_cfg["eos_token"]])
    w.add_add_bos_token(add_bos)
    w.add_chat_template(tok_cfg["chat_template"])

    for name, t in state.items():
        t = np.asarray(t, dtype=np.float32)
        if ".q_proj." in name:
            t = llama_cpp_permute(t, heads, heads)
        elif ".k_proj." in name:
            t = llama_cpp_permute(t, heads, kv)
        if qtype == "Q8_0" and t.ndim == 2:
            w.add_tensor(_hf_to_gguf_name(name), gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(_hf_to_gguf_name(name), np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---- session fixtures (import them into a test module to use them)

@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tied-embedding Llama checkpoint (treat as read-only; copy it to modify)."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny untied Qwen2 checkpoint (q/k/v biases)."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny-qwen2", model_type="qwen2", tie=False)


def make_tiny_moe(directory: str | Path) -> Path:
    """A tiny Mixtral checkpoint: 5 experts per layer, 2 per token, weights N(0, 0.1) so routing varies."""
    return make_tiny_checkpoint(directory, model_type="mixtral", tie=False, init_std=0.1, num_local_experts=5,
                                num_experts_per_tok=2)


@pytest.fixture(scope="session")
def tiny_moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make_tiny_moe` in a temporary folder."""
    return make_tiny_moe(tmp_path_factory.mktemp("tiny") / "tiny-mixtral")


@pytest.fixture(scope="module")
def tiny_moe_loaded(tiny_moe_dir: Path) -> Any:
    """`tiny_moe_dir` loaded by the engine, once per test module."""
    from inspector.models.loader import load_model

    return load_model(str(tiny_moe_dir))


def run_bench_quick(name: str, directory: Path, **checkpoint: Any) -> str:
    """Run `python -m bench.<name> --quick` from the repository root (as the README says) on a tiny checkpoint
    written into `directory`; its stdout (it must exit 0)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    model = make_tiny_checkpoint(directory, **checkpoint)
    out = subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick", "--model", str(model)],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout
