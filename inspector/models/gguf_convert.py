"""GGUF (llama.cpp's format) -> a Hugging Face-layout directory our loader reads.

`convert_gguf(path, out_dir)` writes into `out_dir`: config.json (HF keys), model.safetensors (fp32,
HF tensor names, Q/K rows un-permuted), tokenizer.json (byte-level BPE rebuilt from the GGUF vocab and
merges) and tokenizer_config.json (chat template, special token strings). Atomicity is the caller's
job (see `inspector.models.sources`). Only the `llama` architecture with a byte-level BPE (`gpt2`) vocabulary
is read here, and `gemma3` by `inspector.models.gguf_gemma3`; anything else raises `ModelLoadError`
naming the GGUF key and value.

Why the permutation: llama.cpp rotates interleaved pairs (x0,x1),(x2,x3)... while HF rotates halves
(x_i, x_{i+d/2}). The GGUF converter reorders the rows of attn_q/attn_k so llama.cpp's RoPE gives HF's
result; we undo it so our HF-style `rotate_half` RoPE sees HF's layout.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inspector.engine.config import ModelConfig
from inspector.errors import ModelLoadError, UnsupportedConfigError
from inspector.units import format_bytes

Log = Callable[[str], None]

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
_BLOCK_NAMES = {
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
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

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
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"
    m = re.fullmatch(r"(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(1) in _TOP_NAMES:
        return f"{_TOP_NAMES[m.group(1)]}.{m.group(2)}"
    if gguf_name == "rope_freqs.weight":
        raise UnsupportedConfigError("unsupported GGUF: tensor rope_freqs.weight (RoPE frequency scaling) is not implemented")
    raise ModelLoadError(f"unsupported GGUF: unknown tensor {gguf_name!r} (only the llama architecture is read)")


def open_gguf(path: Path) -> Any:
    """A `gguf.GGUFReader` (memory-mapped); unreadable files raise ModelLoadError."""
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError/struct errors/IndexError on bad files
        raise ModelLoadError(f"cannot read GGUF file {path}: {type(exc).__name__}: {exc}") from None


def _get(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _round32(x: float) -> float:
    """A float32 metadata value as the short decimal it was written from (9.99999975e-06 -> 1e-05)."""
    return float(f"{float(np.float32(x)):.7g}")


def source_format(reader: Any) -> str:
    """E.g. "GGUF Q4_1", from general.file_type (falls back to the most common tensor type)."""
    import gguf

    ft = _get(reader, "general.file_type")
    if ft is not None:
        try:
            return "GGUF " + gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    types = [t.tensor_type.name for t in reader.tensors]
    return "GGUF " + max(set(types), key=types.count)


def source_types(reader: Any) -> dict[str, list]:
    """Each tensor's storage type in the file and its parameter count, under its HF name:
    {"model.embed_tokens.weight": ["Q8_0", 28311552], ...} (what "fp32" was rounded from, tensor by tensor)."""
    hf_name: Callable[[str], str] = hf_tensor_name
    if _get(reader, "general.architecture") == "gemma3":
        from inspector.models.gguf_gemma3 import hf_name
    return {hf_name(t.name): [t.tensor_type.name, int(np.prod(t.shape))] for t in reader.tensors}


def hf_config(reader: Any) -> dict[str, Any]:
    """The HF config.json for a llama GGUF; raises on anything the engine does not implement."""
    arch = _get(reader, "general.architecture")
    if arch != "llama":
        raise UnsupportedConfigError(f"unsupported GGUF: general.architecture={arch!r} (supported: llama, gemma3)")
    scaling = _get(reader, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedConfigError(f"unsupported GGUF: {arch}.rope.scaling.type={scaling!r} (not implemented)")
    names = {t.name for t in reader.tensors}
    heads = int(_get(reader, f"{arch}.attention.head_count"))
    kv_heads = _get(reader, f"{arch}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):
        raise UnsupportedConfigError(f"unsupported GGUF: {arch}.attention.head_count_kv is per-layer")
    hidden = int(_get(reader, f"{arch}.embedding_length"))
    head_dim = _get(reader, f"{arch}.attention.key_length") or _get(reader, f"{arch}.rope.dimension_count")
    tokens = _get(reader, "tokenizer.ggml.tokens") or []
    bias = any(n.endswith("attn_q.bias") for n in names)
    cfg = ModelConfig(
        vocab_size=int(_get(reader, f"{arch}.vocab_size") or len(tokens)),
        hidden_size=hidden,
        intermediate_size=int(_get(reader, f"{arch}.feed_forward_length")),
        num_hidden_layers=int(_get(reader, f"{arch}.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(kv_heads),
        head_dim=int(head_dim or hidden // heads),
        max_position_embeddings=int(_get(reader, f"{arch}.context_length", 2048)),
        rms_norm_eps=_round32(_get(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=_round32(_get(reader, f"{arch}.rope.freq_base", 10000.0)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=bias,
        bos_token_id=_get(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_get(reader, "tokenizer.ggml.eos_token_id"),
    )
    return {**cfg.to_hf(), "torch_dtype": "float32"}


def hf_tensors(reader: Any, config: dict[str, Any], log: Log | None = None) -> dict[str, np.ndarray]:
    """Dequantize every tensor to fp32 under its HF name, with Q/K rows back in HF order."""
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    n = len(reader.tensors)
    for i, t in enumerate(reader.tensors):
        name = hf_tensor_name(t.name)
        try:
            w = dequantize(t.data, t.tensor_type)
        except NotImplementedError as exc:
            raise ModelLoadError(f"unsupported GGUF tensor type for {t.name}: {exc}") from None
        w = np.ascontiguousarray(w, dtype=np.float32)  # (out, in) = HF layout; 1-D for norms and biases
        if ".self_attn.q_proj." in name:
            w = unpermute_qk(w, config["num_attention_heads"])
        elif ".self_attn.k_proj." in name:
            w = unpermute_qk(w, config["num_key_value_heads"])
        out[name] = w
        if log and (i + 1) % 50 == 0:
            log(f"  dequantized {i + 1}/{n} tensors")
    return out


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the alphabet of byte-level BPE vocabularies)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def _check_tokenizer(reader: Any) -> str:
    """The pre-tokenizer name, after checking we can rebuild this GGUF's tokenizer exactly."""
    kind = _get(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.model={kind!r} (only byte-level BPE 'gpt2')")
    pre = _get(reader, "tokenizer.ggml.pre", "default")
    if pre not in _SUPPORTED_PRE:
        raise UnsupportedConfigError(f"unsupported GGUF: tokenizer.ggml.pre={pre!r} (supported: {', '.join(_SUPPORTED_PRE)})")
    return pre


def check_gguf(path: Path) -> None:
    """Fail fast (before any conversion starts) on files we cannot read or convert."""
    reader = open_gguf(path)
    if _get(reader, "general.architecture") == "gemma3":
        from inspector.models.gguf_gemma3 import check
        return check(reader)
    hf_config(reader)
    _check_tokenizer(reader)


def hf_tokenizer(reader: Any) -> tuple[Any, dict[str, Any]]:
    """(tokenizers.Tokenizer, tokenizer_config dict) rebuilt from the GGUF vocabulary metadata."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    pre = _check_tokenizer(reader)
    tokens: list[str] = _get(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _get(reader, "tokenizer.ggml.merges", [])]
    types = _get(reader, "tokenizer.ggml.token_type") or [int(gguf.TokenType.NORMAL)] * len(tokens)

    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":  # SmolLM: every digit is its own pre-token, then GPT-2's byte-level split
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    control = [t for t, ty in zip(tokens, types) if ty == int(gguf.TokenType.CONTROL)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])

    def token_str(key: str) -> str | None:
        i = _get(reader, key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    tok_cfg = {
        "tokenizer_class": "GPT2Tokenizer",  # byte-level BPE; tells transformers not to rebuild it
        "bos_token": token_str("tokenizer.ggml.bos_token_id"),
        "eos_token": token_str("tokenizer.ggml.eos_token_id"),
        "unk_token": token_str("tokenizer.ggml.unknown_token_id"),
        "pad_token": token_str("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(_get(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_prefix_space": False,
        "model_max_length": _get(reader, "llama.context_length", 2048),
        "chat_template": _get(reader, "tokenizer.chat_template"),
    }
    return tok, tok_cfg


def convert_gguf(path: Path, out_dir: Path, log: Log | None = None) -> dict[str, Any]:
    """Write the HF-format files for GGUF `path` into existing `out_dir`; return source facts for the marker."""
    from safetensors.numpy import save_file

    t0 = time.perf_counter()
    reader = open_gguf(path)
    if _get(reader, "general.architecture") == "gemma3":  # its own names, norms and tokenizer
        from inspector.models.gguf_gemma3 import convert_gemma3
        return convert_gemma3(reader, path, out_dir, log, source_format(reader))
    config = hf_config(reader)
    tokenizer, tok_cfg = hf_tokenizer(reader)
    if log:
        log(f"converting {path.name}: {len(reader.tensors)} tensors, {source_format(reader)}")
    tensors = hf_tensors(reader, config, log)
    ModelConfig.from_hf(config)  # validate before writing anything
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    if log:
        log(f"  wrote fp32 safetensors ({format_bytes(sum(w.nbytes for w in tensors.values()))}) "
            f"in {time.perf_counter() - t0:.1f} s")
    return {"source_format": source_format(reader), "source_bytes": path.stat().st_size,
            "source_file": path.name, "gguf_name": _get(reader, "general.name"),
            "source_types": source_types(reader)}
