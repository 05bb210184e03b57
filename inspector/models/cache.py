"""The conversion cache: a converted source lives in `<home>/models/<name>/`, published atomically.

`<home>` is `$INSPECTOR_HOME`, else `~/.cache/inference-inspector` (`inspector_home()`).
`convert_once(target, produce, what)` runs `produce(tmp_dir) -> facts` in a temp dir beside `target`, then
writes the completion marker (`inspector-source.json`: those facts, e.g. the source's format and size, and
the converter's version `CONVERTER`) last, and one `os.rename` publishes the directory. A directory without
the marker is never used; one whose marker names another converter version is converted again and replaced
(another version writes other files). `Resolved` is what every source resolves to.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MARKER = "inspector-source.json"
# The version of what the converters write: a directory whose marker names another one is converted again.
CONVERTER = 3  # 2: tokenizer.json prepends BOS where the model adds it; 3: the marker holds each tensor's type


@dataclass(frozen=True)
class Resolved:
    directory: Path  # HF-format dir: config.json, *.safetensors, tokenizer.json
    name: str
    source: str  # what was asked for, normalised
    source_format: str | None = None  # known for conversions; None = read it from the weights
    source_bytes: int | None = None
    source_types: dict[str, list] | None = None  # a GGUF conversion's {HF name: [file type, params]}


def inspector_home() -> Path:
    """Where downloads and converted models are kept."""
    return Path(os.environ.get("INSPECTOR_HOME") or Path.home() / ".cache" / "inference-inspector")


def progress(msg: str) -> None:
    """One progress line on stderr (downloads and conversions take seconds to minutes)."""
    print(msg, file=sys.stderr, flush=True)


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The completion marker's facts, or None when `directory` is not a finished conversion."""
    try:
        return json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _current(marker: dict[str, Any] | None) -> bool:
    return marker is not None and marker.get("converter") == CONVERTER


def _publish(tmp: Path, target: Path) -> None:
    """Rename `tmp` to `target`; a stale `target` is moved aside first; another process's fresh one is kept."""
    if target.exists() and not _current(read_marker(target)):
        aside = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
        try:
            os.rename(target, aside / target.name)
        except OSError:  # another process moved it first
            pass
        shutil.rmtree(aside, ignore_errors=True)  # processes that mapped its files keep reading them
    try:
        os.rename(tmp, target)
    except OSError:  # another process published it first: keep theirs
        if not _current(read_marker(target)):
            raise


def convert_once(target: Path, produce: Callable[[Path], dict[str, Any]], what: str) -> dict[str, Any]:
    """Run `produce(tmp_dir) -> marker facts` unless `target` is already complete; publish atomically."""
    marker = read_marker(target)
    if _current(marker):
        return marker
    target.parent.mkdir(parents=True, exist_ok=True)
    if marker is None and target.exists():  # left by an interrupted run of an older layout: never trusted
        shutil.rmtree(target, ignore_errors=True)
    t0 = time.perf_counter()
    if marker is None:
        progress(f"first use of {what}: converting into {target} (one time only)")
    else:
        progress(f"{target} was written by another version of the converter: converting {what} again")
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        facts = {**produce(tmp), "converter": CONVERTER}
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is a normal directory
        for f in tmp.iterdir():
            f.chmod(0o644)
        (tmp / MARKER).write_text(json.dumps(facts, indent=2) + "\n")
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"converted {what} in {time.perf_counter() - t0:.1f} s; later loads read the cache")
    return read_marker(target) or facts
