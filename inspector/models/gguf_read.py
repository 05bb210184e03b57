"""What every GGUF architecture module shares: reading the file, its metadata and tensors, its tokenizer's
special tokens, and writing the Hugging Face-layout directory.

`open_gguf(path)` memory-maps a file (`ModelLoadError` when unreadable); `meta(reader, key, default)` reads one
metadata value; `dequantized(reader, log)` yields every tensor as fp32 in GGUF order, and
`mapped_name(name, block_names, top_names)` gives its HF name from an architecture's tables. `special_tokens(reader,
add_bos_default)` reads the special-token strings and BOS flag into tokenizer_config.json keys, refusing a
tokenizer that appends EOS to a prompt (the engine never does). `write_hf_dir(out_dir, config, tensors,
tokenizer, tok_cfg)` writes config.json, model.safetensors, tokenizer.json and tokenizer_config.json; when
the tokenizer adds BOS it gives tokenizer.json a post-processor that prepends it, which is where
`transformers` reads that rule from (the engine's own `Tokenizer` encodes without post-processing and adds
BOS itself, from `add_bos_token`), so both give a plain prompt the same ids.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from inspector.errors import ModelLoadError, UnsupportedConfigError

Log = Callable[[str], None]


def open_gguf(path: Path) -> Any:
    """A `gguf.GGUFReader` (memory-mapped); unreadable files raise ModelLoadError."""
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError/struct errors/IndexError on bad files
        raise ModelLoadError(f"cannot read GGUF file {path}: {type(exc).__name__}: {exc}") from None


def meta(reader: Any, key: str, default: Any = None) -> Any:
    """The metadata value under `key` (a Python scalar, string or list), `default` when absent."""
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def round32(x: float) -> float:
    """A float32 metadata value as the short decimal it was written from (9.99999975e-06 -> 1e-05)."""
    return float(f"{float(np.float32(x)):.7g}")


def source_types(reader: Any, hf_name: Callable[[str], str]) -> dict[str, list]:
    """Each tensor's storage type in the file and its parameter count, under its HF name:
    {"model.embed_tokens.weight": ["Q8_0", 28311552], ...} (what "fp32" was rounded from, tensor by tensor)."""
    return {hf_name(t.name): [t.tensor_type.name, int(np.prod(t.shape))] for t in reader.tensors}


def source_format(reader: Any) -> str:
    """E.g. "GGUF Q4_1", from general.file_type (falls back to the most common tensor type)."""
    import gguf

    ft = meta(reader, "general.file_type")
    if ft is not None:
        try:
            return "GGUF " + gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    types = [t.tensor_type.name for t in reader.tensors]
    return "GGUF " + max(set(types), key=types.count)


def mapped_name(gguf_name: str, block_names: dict[str, str], top_names: dict[str, str]) -> str | None:
    """`blk.3.attn_q.weight` -> `model.layers.3.{block_names["attn_q"]}.weight`, `token_embd.weight` ->
    `{top_names["token_embd"]}.weight` (biases alike); None for a name neither table has."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(2) in block_names:
        return f"model.layers.{m.group(1)}.{block_names[m.group(2)]}.{m.group(3)}"
    m = re.fullmatch(r"(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(1) in top_names:
        return f"{top_names[m.group(1)]}.{m.group(2)}"
    return None


def dequantized(reader: Any, log: Log | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, fp32 array) for every tensor; arrays are (out, in) = HF layout, 1-D for norms and biases."""
    from gguf.quants import dequantize

    n = len(reader.tensors)
    for i, t in enumerate(reader.tensors):
        try:
            w = dequantize(t.data, t.tensor_type)
        except NotImplementedError as exc:
            raise ModelLoadError(f"unsupported GGUF tensor type for {t.name}: {exc}") from None
        yield t.name, np.ascontiguousarray(w, dtype=np.float32)
        if log and (i + 1) % 50 == 0:
            log(f"  dequantized {i + 1}/{n} tensors")


def special_tokens(reader: Any, add_bos_default: bool) -> dict[str, Any]:
    """tokenizer_config.json's special-token keys (token strings, add_bos_token, add_eos_token, chat_template)."""
    if meta(reader, "tokenizer.ggml.add_eos_token", False):
        raise UnsupportedConfigError("unsupported GGUF: tokenizer.ggml.add_eos_token=True (the engine never "
                                     "appends EOS to a prompt)")
    tokens: list[str] = meta(reader, "tokenizer.ggml.tokens") or []

    def token_str(key: str) -> str | None:
        i = meta(reader, key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    bos = token_str("tokenizer.ggml.bos_token_id")
    return {
        "bos_token": bos,
        "eos_token": token_str("tokenizer.ggml.eos_token_id"),
        "unk_token": token_str("tokenizer.ggml.unknown_token_id"),
        "pad_token": token_str("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bos is not None and bool(meta(reader, "tokenizer.ggml.add_bos_token", add_bos_default)),
        "add_eos_token": False,
        "chat_template": meta(reader, "tokenizer.chat_template"),
    }


def _with_bos(tokenizer: Any, tok_cfg: dict[str, Any]) -> Any:
    """`tokenizer` with a post-processor that prepends BOS when tok_cfg says the tokenizer adds it."""
    from tokenizers import processors

    if tok_cfg.get("add_bos_token"):
        bos = tok_cfg["bos_token"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tokenizer.token_to_id(bos))])
    return tokenizer


def write_hf_dir(out_dir: Path, config: dict[str, Any], tensors: dict[str, np.ndarray], tokenizer: Any,
                 tok_cfg: dict[str, Any]) -> None:
    """Write the HF-format files into existing `out_dir`: config.json, fp32 model.safetensors, tokenizer files."""
    from safetensors.numpy import save_file

    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _with_bos(tokenizer, tok_cfg).save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
