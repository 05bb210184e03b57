"""GGUF files of llama.cpp's `gemma3` architecture -> a Hugging Face-layout Gemma 3 (text) directory.

`convert_gemma3(reader, path, out_dir, log)` writes config.json (model_type gemma3_text), model.safetensors
(fp32, HF names) and tokenizer.json / tokenizer_config.json, like `gguf_convert.convert_gguf` (which hands
gemma3 files here). What differs from the llama architecture:
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
  matched before BPE. BOS is prepended to plain prompts (`add_bos_token`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inspector.engine.config import FULL, SLIDING, ModelConfig
from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.models.gguf_convert import _get, _round32, source_types
from inspector.units import format_bytes

Log = Callable[[str], None]
ARCH = "gemma3"
SLIDING_PERIOD = 6  # llama.cpp: every sixth layer is global
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
CONTROL, USER_DEFINED = 3, 4  # gguf.TokenType values


def hf_name(gguf_name: str) -> str:
    """`blk.3.post_ffw_norm.weight` -> `model.layers.3.post_feedforward_layernorm.weight`; unknown names raise."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.weight"
    m = re.fullmatch(r"(\w+)\.weight", gguf_name)
    if m and m.group(1) in _TOP_NAMES:
        return f"{_TOP_NAMES[m.group(1)]}.weight"
    raise ModelLoadError(f"unsupported GGUF: unknown tensor {gguf_name!r} for the gemma3 architecture")


def hf_config(reader: Any) -> dict[str, Any]:
    """config.json of a Gemma 3 text model from the GGUF metadata (see the module doc for the constants)."""
    a = ARCH
    kv_heads = _get(reader, f"{a}.attention.head_count_kv")
    if isinstance(kv_heads, list):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.attention.head_count_kv is per-layer")
    scaling = _get(reader, f"{a}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedConfigError(f"unsupported GGUF: {a}.rope.scaling.type={scaling!r} (not implemented)")
    layers = int(_get(reader, f"{a}.block_count"))
    head_dim = int(_get(reader, f"{a}.attention.key_length"))
    names = {t.name for t in reader.tensors}
    cfg = ModelConfig(
        vocab_size=len(_get(reader, "tokenizer.ggml.tokens")),
        hidden_size=int(_get(reader, f"{a}.embedding_length")),
        intermediate_size=int(_get(reader, f"{a}.feed_forward_length")),
        num_hidden_layers=layers,
        num_attention_heads=int(_get(reader, f"{a}.attention.head_count")),
        num_key_value_heads=int(kv_heads),
        head_dim=head_dim,
        max_position_embeddings=int(_get(reader, f"{a}.context_length", 32768)),
        rms_norm_eps=_round32(_get(reader, f"{a}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=_round32(_get(reader, f"{a}.rope.freq_base", 1e6)),
        tie_word_embeddings="output.weight" not in names,
        model_type="gemma3_text",
        bos_token_id=_get(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_get(reader, "tokenizer.ggml.eos_token_id"),
        hidden_act="gelu_pytorch_tanh",
        sliding_window=int(_get(reader, f"{a}.attention.sliding_window")),
        layer_types=tuple(FULL if (i + 1) % SLIDING_PERIOD == 0 else SLIDING for i in range(layers)),
        rope_local_theta=LOCAL_ROPE_BASE,
        query_pre_attn_scalar=float(head_dim),
    )
    return {**cfg.to_hf(), "pad_token_id": _get(reader, "tokenizer.ggml.padding_token_id"), "torch_dtype": "float32"}


def hf_tensors(reader: Any, log: Log | None = None) -> dict[str, np.ndarray]:
    """Every tensor dequantized to fp32 under its HF name, norms as transformers' w (stored w + 1)."""
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    for i, t in enumerate(reader.tensors):
        name = hf_name(t.name)
        try:
            w = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)  # (out, in) = HF layout
        except NotImplementedError as exc:
            raise ModelLoadError(f"unsupported GGUF tensor type for {t.name}: {exc}") from None
        if t.name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        out[name] = w
        if log and (i + 1) % 50 == 0:
            log(f"  dequantized {i + 1}/{len(reader.tensors)} tensors")
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

    kind = _get(reader, "tokenizer.ggml.model")
    if kind != "llama":
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.model={kind!r} for gemma3 (only 'llama', "
                                     "SentencePiece-style)")
    tokens: list[str] = _get(reader, "tokenizer.ggml.tokens")
    scores: list[float] = _get(reader, "tokenizer.ggml.scores")
    types: list[int] = _get(reader, "tokenizer.ggml.token_type")

    def token_str(key: str) -> str | None:
        i = _get(reader, key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    unk = token_str("tokenizer.ggml.unknown_token_id") or "<unk>"
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
        "bos_token": token_str("tokenizer.ggml.bos_token_id"),
        "eos_token": token_str("tokenizer.ggml.eos_token_id"),
        "unk_token": unk,
        "pad_token": token_str("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(_get(reader, "tokenizer.ggml.add_bos_token", True)),
        "model_max_length": _get(reader, f"{ARCH}.context_length", 32768),
        "chat_template": _get(reader, "tokenizer.chat_template"),
    }
    return tok, tok_cfg


def check(reader: Any) -> None:
    """Fail fast on a gemma3 GGUF this module cannot convert."""
    ModelConfig.from_hf(hf_config(reader))
    for t in reader.tensors:
        hf_name(t.name)


def convert_gemma3(reader: Any, path: Path, out_dir: Path, log: Log | None = None,
                   source_format: str = "GGUF") -> dict[str, Any]:
    """Write the HF-format files of the gemma3 GGUF `path` into `out_dir`; the marker's source facts."""
    from safetensors.numpy import save_file

    t0 = time.perf_counter()
    config = hf_config(reader)
    ModelConfig.from_hf(config)  # validate before writing anything
    if log:
        log(f"converting {path.name}: {len(reader.tensors)} tensors, {source_format}")
    tokenizer, tok_cfg = hf_tokenizer(reader)
    tensors = hf_tensors(reader, log)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    if log:
        log(f"  wrote fp32 safetensors ({format_bytes(sum(w.nbytes for w in tensors.values()))}) "
            f"in {time.perf_counter() - t0:.1f} s")
    return {"source_format": source_format, "source_bytes": path.stat().st_size,
            "source_file": path.name, "gguf_name": _get(reader, "general.name"),
            "source_types": source_types(reader)}
