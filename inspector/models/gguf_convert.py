"""GGUF (llama.cpp's format) -> a Hugging Face-layout directory our loader and `transformers` read.

`convert_gguf(path, out_dir, log)` writes into existing `out_dir`: config.json (HF keys), model.safetensors
(fp32, HF tensor names), tokenizer.json and tokenizer_config.json (chat template, special tokens, the BOS
rule), and returns the source facts for the cache's marker. `check_gguf(path)` fails fast, before any
conversion starts. Atomicity is the caller's job (`inspector.models.cache`).

The file's `general.architecture` picks its module from `ARCHITECTURES`; each implements `hf_config(reader)`,
`hf_tokenizer(reader)`, `hf_tensors(reader, config, log)` and `check(reader)` over the shared reader
`inspector.models.gguf_read`. Any other architecture raises `UnsupportedConfigError` naming it.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from inspector.engine.config import ModelConfig
from inspector.errors import UnsupportedConfigError
from inspector.models import gguf_gemma3, gguf_llama
from inspector.models.gguf_read import Log, meta, open_gguf, source_format, source_types, write_hf_dir
from inspector.units import format_bytes

ARCHITECTURES: dict[str, ModuleType] = {"llama": gguf_llama, "gemma3": gguf_gemma3}


def architecture(reader: Any) -> ModuleType:
    """The module that converts this GGUF's `general.architecture`."""
    arch = meta(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedConfigError(f"unsupported GGUF: general.architecture={arch!r} "
                                     f"(supported: {', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch]


def check_gguf(path: Path) -> None:
    """Fail fast (before any conversion starts) on files we cannot read or convert."""
    reader = open_gguf(path)
    architecture(reader).check(reader)


def convert_gguf(path: Path, out_dir: Path, log: Log | None = None) -> dict[str, Any]:
    """Write the HF-format files for GGUF `path` into existing `out_dir`; return source facts for the marker."""
    t0 = time.perf_counter()
    reader = open_gguf(path)
    arch = architecture(reader)
    config = arch.hf_config(reader)
    ModelConfig.from_hf(config)  # validate before writing anything
    tokenizer, tok_cfg = arch.hf_tokenizer(reader)
    if log:
        log(f"converting {path.name}: {len(reader.tensors)} tensors, {source_format(reader)}")
    tensors = arch.hf_tensors(reader, config, log)
    write_hf_dir(out_dir, config, tensors, tokenizer, tok_cfg)
    if log:
        log(f"  wrote fp32 safetensors ({format_bytes(sum(w.nbytes for w in tensors.values()))}) "
            f"in {time.perf_counter() - t0:.1f} s")
    return {"source_format": source_format(reader), "source_bytes": path.stat().st_size,
            "source_file": path.name, "gguf_name": meta(reader, "general.name"),
            "source_types": source_types(reader, arch.hf_name)}
