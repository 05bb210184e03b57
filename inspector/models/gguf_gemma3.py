"""GGUF files of llama.cpp's `gemma3` architecture -> a Hugging Face-layout Gemma 3 (text) directory.

The architecture interface `inspector.models.gguf_convert` dispatches to, as for `inspector.models.gguf_llama`:
`hf_config(reader)` (model_type gemma3_text), `hf_tokenizer(reader)`, `hf_tensors(reader, config, log)`
(fp32, HF names) and `check(reader)`. What differs from the llama architecture:
- Tensor names: attn_q_norm/attn_k_norm -> self_attn.q_norm/k_norm, post_attention_norm ->
  post_attention_layernorm, ffn_norm -> pre_feedforward_layernorm, post_ffw_norm -> post_feedforward_layernorm.
- Every RMSNorm weight is stored as w + 1 (llama.cpp multiplies by the stored value, transformers' Gemma by
  1 + w): 1 is subtracted. Q/K rows are not permuted (Gemma's RoPE is already the rotate-half kind).
- Config keys the GGUF does not carry are llama.cpp's own constants for the architecture: sliding layers
  every layer but each sixth, their RoPE base 10,000, query_pre_attn_scalar = key_length.
- Tokenizer: SentencePiece-style (`tokenizer.ggml.model` "llama": pieces with scores, no merges). It is
  rebuilt as transformers' GemmaTokenizer builds one: a byte-fallback BPE whose merges come from the
  vocabulary (every split of a piece into two pieces, ranked by the piece's score), spaces normalised to
  "▁", control pieces as special tokens and user-defined pieces (whitespace runs, markup) as added tokens
  matched before BPE. BOS is prepended to plain prompts (`add_bos_token`, true unless the GGUF says not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inspector.engine.config import FULL, SLIDING, ModelConfig
from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.models.gguf_read import Log, dequantized, mapped_name, meta, round32, special_tokens

ARCH = "gemma3"
SLIDING_PERIOD = 6  # llama.cpp: every sixth layer is global
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3
BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
CONTROL, USER_DEFINED = 3, 4  # gguf.TokenType values


def hf_name(gguf_name: str) -> str:
    """`blk.3.post_ffw_norm.weight` -> `model.layers.3.post_feedforward_layernorm.weight`; unknown names raise."""
    name = mapped_name(gguf_name, BLOCK_NAMES, TOP_NAMES)
    if name is not None and name.endswith(".weight"):  # Gemma 3 has no biases
        return name
    raise ModelLoadError(f"unsupported GGUF: unknown tensor {gguf_name!r} for the gemma3 architecture")


def hf_config(reader: Any) -> dict[str, Any]:
    """config.json of a Gemma 3 text model from the GGUF metadata (see the module doc for the constants)."""
    a = ARCH
    kv_heads = meta(reader, f"{a}.attention.head_count_kv")
    if isinstance(kv_heads, list):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.attention.head_count_kv is per-layer")
    scaling = meta(reader, f"{a}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.rope.scaling.type={scaling!r} (not implemented)")
    layers = int(meta(reader, f"{a}.block_count"))
    head_dim = int(meta(reader, f"{a}.attention.key_length"))
    names = {t.name for t in reader.tensors}
    cfg = ModelConfig(
        vocab_size=len(meta(reader, "tokenizer.ggml.tokens")),
        hidden_size=int(meta(reader, f"{a}.embedding_length")),
        intermediate_size=int(meta(reader, f"{a}.feed_forward_length")),
        num_hidden_layers=layers,
        num_attention_heads=int(meta(reader, f"{a}.attention.head_count")),
        num_key_value_heads=int(kv_heads),
        head_dim=head_dim,
        max_position_embeddings=int(meta(reader, f"{a}.context_length", 32768)),
        rms_norm_eps=round32(meta(reader, f"{a}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=round32(meta(reader, f"{a}.rope.freq_base", 1e6)),
        tie_word_embeddings="output.weight" not in names,
        model_type="gemma3_text",
        bos_token_id=meta(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=meta(reader, "tokenizer.ggml.eos_token_id"),
        hidden_act="gelu_pytorch_tanh",
        sliding_window=int(meta(reader, f"{a}.attention.sliding_window")),
        layer_types=tuple(FULL if (i + 1) % SLIDING_PERIOD == 0 else SLIDING for i in range(layers)),
        rope_local_theta=LOCAL_ROPE_BASE,
        query_pre_attn_scalar=float(head_dim),
    )
    return {**cfg.to_hf(), "pad_token_id": meta(reader, "tokenizer.ggml.padding_token_id"), "torch_dtype": "float32"}


def hf_tensors(reader: Any, config: dict[str, Any], log: Log | None = None) -> dict[str, np.ndarray]:
    """Every tensor dequantized to fp32 under its HF name, norms as transformers' w (stored w + 1)."""
    out: dict[str, np.ndarray] = {}
    for gguf_name, w in dequantized(reader, log):
        out[hf_name(gguf_name)] = w - np.float32(1.0) if gguf_name.endswith("norm.weight") else w
    return out


def spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges of a SentencePiece vocabulary: each split of a piece into two pieces, the merges of
    higher-scored pieces first (ties: longer left part first, then longer right part), as transformers'
    `generate_merges` ranks them."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in zip(tokens, scores):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


def hf_tokenizer(reader: Any) -> tuple[Any, dict[str, Any]]:
    """(tokenizers.Tokenizer, tokenizer_config dict) rebuilt from the SentencePiece-style vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    kind = meta(reader, "tokenizer.ggml.model")
    if kind != "llama":
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.model={kind!r} for gemma3 (only 'llama', "
                                     "SentencePiece-style)")
    tokens: list[str] = meta(reader, "tokenizer.ggml.tokens")
    scores: list[float] = meta(reader, "tokenizer.ggml.scores")
    types: list[int] = meta(reader, "tokenizer.ggml.token_type")

    specials = special_tokens(reader, add_bos_default=True)
    unk = specials["unk_token"] or "<unk>"
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(BPE(vocab=vocab, merges=spm_merges(tokens, scores), fuse_unk=True, unk_token=unk,
                        dropout=None, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL])
    tok_cfg = {
        "tokenizer_class": "GemmaTokenizer",
        **specials,
        "unk_token": unk,
        "model_max_length": meta(reader, f"{ARCH}.context_length", 32768),
    }
    return tok, tok_cfg


def check(reader: Any) -> None:
    """Fail fast on a gemma3 GGUF this module cannot convert."""
    ModelConfig.from_hf(hf_config(reader))
    special_tokens(reader, add_bos_default=True)
    for t in reader.tensors:
        hf_name(t.name)
