"""GGUF files of llama.cpp's `llama` architecture with a byte-level BPE (`gpt2`) vocabulary -> HF Llama.

The architecture interface `inspector.models.gguf_convert` dispatches to: `hf_config(reader)` (config.json,
HF keys), `hf_tokenizer(reader)` (tokenizer.json rebuilt from the GGUF vocab and merges, and
tokenizer_config.json), `hf_tensors(reader, config, log)` (fp32, HF tensor names, Q/K rows un-permuted) and
`check(reader)` (fail fast). Anything the engine does not implement raises `UnsupportedConfigError` naming
the GGUF key and value.

Why the permutation: llama.cpp rotates interleaved pairs (x0,x1),(x2,x3)... while HF rotates halves
(x_i, x_{i+d/2}). The GGUF converter reorders the rows of attn_q/attn_k so llama.cpp's RoPE gives HF's
result; we undo it so our HF-style `rotate_half` RoPE sees HF's layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inspector.engine.config import ModelConfig
from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.models.gguf_read import Log, dequantized, mapped_name, meta, round32, special_tokens

ARCH = "llama"
# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# Pre-tokenizers we can rebuild exactly with `tokenizers` (GGUF key tokenizer.ggml.pre).
_SUPPORTED_PRE = ("smollm", "gpt2", "default")


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF -> GGUF row order (what llama.cpp's convert_hf_to_gguf.py does); weights (n*hd, in) or biases (n*hd,)."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    # (n, 2, hd/2, ...) -> (n, hd/2, 2, ...): halves become interleaved pairs
    return w.reshape(n_heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """GGUF -> HF row order, the inverse of `permute_qk`."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    # (n, hd/2, 2, ...) -> (n, 2, hd/2, ...): interleaved pairs become halves
    return w.reshape(n_heads, hd // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def hf_tensor_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; unknown names raise."""
    name = mapped_name(gguf_name, BLOCK_NAMES, TOP_NAMES)
    if name is not None:
        return name
    if gguf_name == "rope_freqs.weight":
        raise UnsupportedConfigError("unsupported GGUF: tensor rope_freqs.weight (RoPE frequency scaling) is not implemented")
    raise ModelLoadError(f"unsupported GGUF: unknown tensor {gguf_name!r} (only the llama architecture is read)")


hf_name = hf_tensor_name  # the name every architecture module gives (`gguf_convert.ARCHITECTURES`)


def hf_config(reader: Any) -> dict[str, Any]:
    """The HF config.json for a llama GGUF; raises on anything the engine does not implement."""
    a = ARCH
    scaling = meta(reader, f"{a}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.rope.scaling.type={scaling!r} (not implemented)")
    names = {t.name for t in reader.tensors}
    heads = int(meta(reader, f"{a}.attention.head_count"))
    kv_heads = meta(reader, f"{a}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.attention.head_count_kv is per-layer")
    hidden = int(meta(reader, f"{a}.embedding_length"))
    head_dim = meta(reader, f"{a}.attention.key_length") or meta(reader, f"{a}.rope.dimension_count")
    tokens = meta(reader, "tokenizer.ggml.tokens") or []
    cfg = ModelConfig(
        vocab_size=int(meta(reader, f"{a}.vocab_size") or len(tokens)),
        hidden_size=hidden,
        intermediate_size=int(meta(reader, f"{a}.feed_forward_length")),
        num_hidden_layers=int(meta(reader, f"{a}.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(kv_heads),
        head_dim=int(head_dim or hidden // heads),
        max_position_embeddings=int(meta(reader, f"{a}.context_length", 2048)),
        rms_norm_eps=round32(meta(reader, f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=round32(meta(reader, f"{a}.rope.freq_base", 10000.0)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=any(n.endswith("attn_q.bias") for n in names),
        bos_token_id=meta(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=meta(reader, "tokenizer.ggml.eos_token_id"),
    )
    return {**cfg.to_hf(), "torch_dtype": "float32"}


def hf_tensors(reader: Any, config: dict[str, Any], log: Log | None = None) -> dict[str, np.ndarray]:
    """Every tensor dequantized to fp32 under its HF name, with Q/K rows back in HF order."""
    out: dict[str, np.ndarray] = {}
    for gguf_name, w in dequantized(reader, log):
        name = hf_tensor_name(gguf_name)
        if ".self_attn.q_proj." in name:
            w = unpermute_qk(w, config["num_attention_heads"])
        elif ".self_attn.k_proj." in name:
            w = unpermute_qk(w, config["num_key_value_heads"])
        out[name] = w
    return out


def _check_tokenizer(reader: Any) -> str:
    """The pre-tokenizer name, after checking we can rebuild this GGUF's tokenizer exactly."""
    kind = meta(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.model={kind!r} (only byte-level BPE 'gpt2')")
    pre = meta(reader, "tokenizer.ggml.pre", "default")
    if pre not in _SUPPORTED_PRE:
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.pre={pre!r} (supported: {', '.join(_SUPPORTED_PRE)})")
    return pre


def hf_tokenizer(reader: Any) -> tuple[Any, dict[str, Any]]:
    """(tokenizers.Tokenizer, tokenizer_config dict) rebuilt from the GGUF vocabulary metadata."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    pre = _check_tokenizer(reader)
    tokens: list[str] = meta(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in meta(reader, "tokenizer.ggml.merges", [])]
    types = meta(reader, "tokenizer.ggml.token_type") or [int(gguf.TokenType.NORMAL)] * len(tokens)

    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":  # SmolLM: every digit is its own pre-token, then GPT-2's byte-level split
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    control = [t for t, ty in zip(tokens, types) if ty == int(gguf.TokenType.CONTROL)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tok_cfg = {
        "tokenizer_class": "GPT2Tokenizer",  # byte-level BPE; tells transformers not to rebuild it
        **special_tokens(reader, add_bos_default=False),
        "add_prefix_space": False,
        "model_max_length": meta(reader, f"{ARCH}.context_length", 2048),
    }
    return tok, tok_cfg


def check(reader: Any) -> None:
    """Fail fast on a llama GGUF this module cannot convert."""
    ModelConfig.from_hf(hf_config(reader))
    _check_tokenizer(reader)
    special_tokens(reader, add_bos_default=False)
    for t in reader.tensors:
        hf_tensor_name(t.name)
