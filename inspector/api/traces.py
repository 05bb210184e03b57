"""`open_trace(path, model=None)`: a trace file (`Run.save`, `inspector run --save-trace`, the page's Save
trace) back as a `Run` with the same accessors and views, read by `inspector.session.trace_file.load_trace`.

Without `model` (or with another model than the one that recorded it) the run is read-only: every view and
accessor works from the file, and `step` refuses in one line naming both models. With the recording model
it steps on with the sampling parameters of its newest step and the interventions it was saved with
(`run.levers`); a run saved with hooks reads but does not step (a hook's function is not in the file).
"""

from __future__ import annotations

import os
from typing import Any

from inspector.api.run import Run
from inspector.errors import InputTypeError
from inspector.generation.request import RunRequest


def open_trace(path: str | os.PathLike[str], model: Any = None) -> Run:
    """The run saved in `path`; InputError for a missing, truncated, corrupted, foreign or newer file. With
    its recording model the run steps on under its saved interventions (`LeverSpec`); a run saved with
    hooks reads but does not step (a hook's function is not in the file)."""
    from inspector.api.model import Model
    from inspector.session.trace_file import load_trace

    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"path must be a file path, got {type(path).__name__}")
    if model is not None and not isinstance(model, Model):
        raise InputTypeError(f"model must be what inspector.load() gives, got {type(model).__name__}")
    session = load_trace(path, None if model is None else model.loaded)
    last = session.records[-1].sample
    params = last.params if last is not None else None
    settings = session.settings
    request = None if settings.get("request") is None else RunRequest.from_json(settings["request"])
    return Run(session, params, model=model if session.read_only is None else None, prompt=settings.get("prompt"),
               chat=settings.get("chat"), system=settings.get("system"), levers=session.lever_spec, request=request)
