"""Trace files in the web app: export this browser's run to a download, import an uploaded one.

Two run events the page wires to its buttons, both taking the page's handlers (`Handlers`) as `h`:
- `export_trace(h, sid)` -> (path of the written file for a `gr.DownloadButton`/`gr.File`, {"status": ...}).
  The file keeps the prompt the run was prefilled from (the controls' values only when it is not known) and
  every token-fork branch of the run (`BranchTree.saved`); opening it shows the same tree.
  Files go to one temporary folder per process, removed at exit; only the newest `EXPORTS_KEPT` are kept
  (Gradio copies a returned file into its own cache when it sends it). `export_trace_shown` is the same
  for a hidden `gr.File`: an update that shows it with the new file.
- `import_trace(h, sid, file, layer, head)` -> what `Handlers.views` returns, so every view redraws from
  the file without running the model. The restored session replaces this browser's, under the visitor's
  lock; it steps on when the page's model recorded it, else Step says why in the status line (switching
  branches replays tokens, so it needs the recording model too).
Caps come first: the file's size against the session memory cap before parsing, the restored session's
retained bytes against it after (`limits.max_trace_mb`), and a trace of another model shape than the
page's is refused (the views are laid out for the page's model). Errors go to the status line
(`refuses`, OSError included); the handlers never raise. The file work (saving, reading, rebuilding the KV cache) runs on the model thread.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.session.branches import BranchTree
from inspector.session.trace_file import load_trace, save_trace
from inspector.ui.link_handlers import run_origin, tree_of
from inspector.ui.model_thread import call
from inspector.ui.refusals import refuses
from inspector.units import format_bytes

EXPORTS_KEPT = 8  # exported files kept on disk per process (older ones are deleted)

_lock = threading.Lock()
_folder: Path | None = None


def export_folder() -> Path:
    """This process's folder of exported traces (made on first use, removed at exit)."""
    global _folder
    with _lock:
        if _folder is None or not _folder.is_dir():
            _folder = Path(tempfile.mkdtemp(prefix="inspector-traces-"))
            atexit.register(shutil.rmtree, _folder, True)
        return _folder


def _new_export_path(model_name: str) -> Path:
    """A fresh path `<folder>/<unique>/trace-<model>.safetensors`; deletes the oldest exports beyond EXPORTS_KEPT."""
    folder = export_folder()
    with _lock:
        old = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
        for stale in old[:max(0, len(old) - EXPORTS_KEPT + 1)]:
            shutil.rmtree(stale, ignore_errors=True)
        unique = Path(tempfile.mkdtemp(dir=folder))
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-.") or "model"
    return unique / f"trace-{safe}.safetensors"


def no_file(sid: Any) -> None:
    """A refused export writes no file."""
    return None


@refuses(lead=no_file, also=(OSError,))  # a file that cannot be written is one line too
def export_trace(h: Any, sid: str | None, prompt: str | None = None, chat: bool | None = None,
                 system: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """Save this browser's run (prompt, chat, system: the page's settings, saved when given)."""
    visitor = h.store.get(sid)
    if visitor is None or visitor.session is None or not visitor.session.records:
        raise InputError("nothing to export yet: press Prefill first")
    path = _new_export_path(visitor.session.loaded.name)
    with visitor.exclusive("export"):
        origin = run_origin(visitor)
        if origin is not None:
            prompt, chat, system = origin.prompt, origin.chat, origin.system
        tree, left_out = tree_of(visitor)
        note = f"; left out {left_out} intervention branches (their changes are not saved)" if left_out else ""
        if tree.branches[tree.current].generated_ids != list(visitor.session.generated_ids):
            tree, note = None, "; only the shown intervention branch (an intervention's changes are not saved)"
        many = tree is not None and len(tree.branches) > 1
        size = call(save_trace, visitor.session, path, prompt=prompt, chat=chat, system=system,
                   branches=tree if many else None)
    kept = f", {len(tree.branches)} branches" if many else ""
    return str(path), {"status": h.render.status(visitor, f"exported the trace: {path.name} ({format_bytes(size)}"
                                                        f"{kept}){note}")}


@refuses(also=(OSError,))  # a file that cannot be read is one line too
def import_trace(h: Any, sid: str | None, file: Any, layer: Any, head: Any) -> dict[str, Any]:
    """Open an uploaded trace file in this browser's session and redraw every view from it."""
    path = _uploaded_path(file)
    cap = h.limits.max_trace_mb * 2**20
    size = path.stat().st_size
    if size >= cap:
        raise InputError(f"the trace file is {format_bytes(size)}; this server allows {h.limits.max_trace_mb} "
                         f"MiB per session (INSPECTOR_MAX_TRACE_MB)")
    if not sid:
        raise InputError("this page has no session id: reload the page")
    sid, visitor = h.store.get_or_create(sid)
    with visitor.exclusive("import"):
        session = call(load_trace, path, h.loaded)
        _admit(h, session, path.name, cap)
        h.store.reset_locked(visitor)  # clears what belonged to the old run (selection, preview, ...)
        visitor.session = session
        if session.saved_tree is not None:  # the run's branches; switching replays them on this session
            visitor.branches = BranchTree.from_saved(session.saved_tree, levers=session.own_levers)
        visitor.max_new_tokens = min(session.max_new_tokens, h.limits.max_steps)
    how = session.read_only or f"it steps on with {h.loaded.name}"
    views = h.views(visitor, layer, head, f"opened {path.name}: {how}")
    h.queue_forward_ahead(visitor)  # as after a prefill: the next Step only samples (nothing when read-only)
    return views


def _admit(h: Any, session: Any, name: str, cap: int) -> None:
    """InputError unless the page can show the restored session: its model's shape, and the memory cap."""
    if session.config != h.loaded.config:
        c = session.config
        raise InputError(f"{name} was recorded with {session.recorded_model['name']} ({c.num_hidden_layers} layers, "
                         f"{c.num_attention_heads} heads, vocab {c.vocab_size}), not with {h.loaded.name}, the model "
                         f"of this page: open it with `inspector trace FILE`")
    if session.retained_nbytes >= cap:
        raise InputError(f"this trace holds {format_bytes(session.retained_nbytes)}; this server allows "
                         f"{h.limits.max_trace_mb} MiB per session (INSPECTOR_MAX_TRACE_MB)")


def _uploaded_path(file: Any) -> Path:
    """The path of what Gradio hands a file input: a path string, or an object with `.path` / `.name`."""
    if file is None or file == "":
        raise InputError("no trace file chosen: pick a .safetensors file first")
    raw = file if isinstance(file, (str, os.PathLike)) else getattr(file, "path", None) or getattr(file, "name", None)
    if raw is None:
        raise InputError("no trace file chosen: pick a .safetensors file first")
    path = Path(raw)
    if not path.is_file():
        raise InputError(f"the uploaded file {path.name} is gone: upload it again")
    return path


def export_trace_shown(h: Any, sid: str | None, prompt: str | None = None, chat: bool | None = None,
                       system: str | None = None) -> tuple[Any, dict[str, Any]]:
    """`export_trace` for the page: the file component shown with the new file (left hidden on an error)."""
    path, views = export_trace(h, sid, prompt, chat, system)
    return (gr.update(value=path, visible=True) if path else gr.skip()), views
