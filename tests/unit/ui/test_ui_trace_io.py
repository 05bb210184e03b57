"""The web app's trace file handlers without a browser, over a tiny model: export a browser's run, import it into
another browser's session of a fresh store, and every view of every tab is equal; caps and bad files are
one line in the status; the imported run steps on, or says why it cannot."""

from __future__ import annotations

import re

from pathlib import Path

import gradio as gr

from inspector.models.loader import load_model
from inspector.session.session import Session
from inspector.ui import trace_io
from inspector.ui.app_model import AppLimits
from inspector.ui.handlers import Handlers
from inspector.ui.model_thread import call, settle
from inspector.ui.visitors import Visitors, new_ui_session
from inspector.ui.trace_io import EXPORTS_KEPT, export_trace, export_trace_shown, import_trace
from tests.support.handlers import no_run_ahead  # noqa: F401 (autouse fixture)
from tests.support.tiny import make_tiny_checkpoint
from tests.support.viz_records import tiny_loaded  # noqa: F401


SAMPLING = (0.8, 5, 1.0, 0.0, 1)  # temperature, top-k, top-p, min-p, seed
TABS = ("residual", "attention", "kv", "sampling", "timing")


def make(loaded, **limits):
    lim = AppLimits(**limits)
    store = Visitors(lambda: new_ui_session(loaded), lim)
    return Handlers.bare(loaded, store), store


def status(views) -> str:
    """The status line of a handler's views (of (session id or file, views): its views)."""
    views = views[-1] if isinstance(views, (tuple, list)) else views
    return views["status"]


def comparable(value):
    """A view's value as drawn, but the state version on the status line (each store numbers its own states)."""
    if hasattr(value, "to_json"):
        return value.to_json()
    return re.sub(r'data-version="\d+"', "", value) if isinstance(value, str) else value


def a_run(h, steps: int = 3) -> str:
    sid, *views = h.prefill(None, "The quick brown fox jumps", False, "", *SAMPLING, 12, 1, 3)
    assert "ii-error" not in status(views)
    for _ in range(steps):
        assert "ii-error" not in status(h.step(sid, *SAMPLING, 1, 3))
    return sid


def test_export_then_import_gives_equal_views(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    sid = a_run(h)
    path, line = export_trace(h, sid, "The quick brown fox jumps", False, "")
    line = status(line)
    assert "ii-error" not in line and "exported the trace: trace-" in line and " KiB)" in line and Path(path).is_file()

    h2, store2 = make(tiny_loaded)  # another server process: a fresh store
    sid2 = store2.new_id()
    views = import_trace(h2, sid2, path, 1, 3)
    assert "ii-error" not in status(views) and f"steps on with {tiny_loaded.name}" in status(views)
    a, b = store.get(sid), store2.get(sid2)
    for layer, head in ((0, 0), (1, 3)):
        for tab in TABS:
            a.tab = b.tab = tab
            va, vb = h.views(a, layer, head), h2.views(b, layer, head)
            assert list(va) == list(vb)
            for key in va:
                assert comparable(va[key]) == comparable(vb[key]), (tab, key)
    a.selected = b.selected = 2  # a prompt position: the attention row of a chip click
    a.tab = b.tab = "attention"
    assert {k: comparable(v) for k, v in h.views(a, 1, 2).items()} == \
        {k: comparable(v) for k, v in h2.views(b, 1, 2).items()}

    # both step on alike
    for _ in range(2):
        h.step(sid, *SAMPLING, 1, 3)
        assert "ii-error" not in status(h2.step(sid2, *SAMPLING, 1, 3))
    assert a.session.generated_ids == b.session.generated_ids and a.session.text == b.session.text


def test_import_runs_the_next_forward_ahead(tiny_loaded, monkeypatch):  # noqa: F811
    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "1")
    h, store = make(tiny_loaded)
    sid = a_run(h, 1)
    path, _ = export_trace(h, sid)
    sid2 = store.new_id()
    import_trace(h, sid2, path, 0, 0)
    settle()  # the forward queued ahead has run
    assert call(lambda: store.get(sid2).session.is_ahead)
    out = h.step(sid2, *SAMPLING, 0, 0)
    h.step(sid, *SAMPLING, 0, 0)
    assert "ii-error" not in status(out)
    assert store.get(sid2).session.generated_ids == store.get(sid).session.generated_ids


def test_a_trace_of_other_weights_opens_read_only(tiny_loaded, tmp_path):  # noqa: F811
    other = load_model(str(make_tiny_checkpoint(tmp_path / "other-tiny", seed=1)))  # same shape, other weights
    h_other, _ = make(other)
    path, _ = export_trace(h_other, a_run(h_other))
    h, store = make(tiny_loaded)
    sid = store.new_id()
    views = import_trace(h, sid, path, 0, 0)
    assert "ii-error" not in status(views) and "read-only" in status(views)
    out = h.step(sid, *SAMPLING, 0, 0)
    assert "ii-error" in status(out) and "other-tiny" in status(out) and tiny_loaded.name in status(out)
    assert store.get(sid).session.generated_ids == _generated(path)


def _generated(path) -> list[int]:
    from inspector.session.trace_file import load_trace

    return load_trace(path).generated_ids


def test_refusals_are_one_status_line_and_keep_the_current_run(tiny_loaded, tmp_path):  # noqa: F811
    h, store = make(tiny_loaded)
    sid = a_run(h, 1)
    before = list(store.get(sid).session.generated_ids)
    bigger = load_model(str(make_tiny_checkpoint(tmp_path / "three-layers", num_hidden_layers=3)))
    h_big, _ = make(bigger)
    big_path, _ = export_trace(h_big, a_run(h_big, 1))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    cases = [
        (None, "no trace file chosen"),
        (str(tmp_path / "gone.safetensors"), "is gone: upload it again"),
        (str(junk), "not a readable trace file"),
        (big_path, f"not with {tiny_loaded.name}, the model of this page"),
    ]
    for file, message in cases:
        line = status(import_trace(h, sid, file, 0, 0))
        assert "ii-error" in line and message in line, (file, line)
    assert store.get(sid).session.generated_ids == before
    small, small_store = make(tiny_loaded, max_trace_mb=1)
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(b"\x00" * (2**20 + 1))  # refused by its size, before it is read
    line = status(import_trace(small, small_store.new_id(), str(huge), 0, 0))
    assert "ii-error" in line and "the trace file is 1.0 MiB; this server allows 1 MiB" in line


def test_a_trace_over_the_memory_cap_is_refused_after_reading(tiny_loaded, monkeypatch):  # noqa: F811
    h, store = make(tiny_loaded)
    path, _ = export_trace(h, a_run(h, 2))
    h2, store2 = make(tiny_loaded)
    monkeypatch.setattr(Session, "retained_nbytes", property(lambda s: 10**12))  # a restored one is a Session
    sid = store2.new_id()
    line = status(import_trace(h2, sid, path, 0, 0))
    assert "ii-error" in line and "this trace holds" in line and "MiB per session" in line
    visitor = store2.get(sid)
    assert visitor is not None and not visitor.session.records  # the refused trace did not replace the session


def test_export_errors_and_the_folder_stays_bounded(tiny_loaded):  # noqa: F811
    h, store = make(tiny_loaded)
    path, line = export_trace(h, store.new_id())
    line = status(line)
    assert path is None and "ii-error" in line and "nothing to export yet" in line
    update, line = export_trace_shown(h, store.new_id())
    line = status(line)
    assert update == gr.skip() and "nothing to export yet" in line  # the hidden file component stays hidden
    sid = a_run(h, 0)
    paths = [export_trace(h, sid)[0] for _ in range(EXPORTS_KEPT + 2)]
    update, _ = export_trace_shown(h, sid)
    assert update["visible"] is True and Path(update["value"]).is_file()
    paths.append(update["value"])
    folder = trace_io.export_folder()
    assert len(list(folder.iterdir())) <= EXPORTS_KEPT
    assert Path(paths[-1]).is_file() and not Path(paths[0]).exists()
    assert Path(paths[-1]).name == f"trace-{tiny_loaded.name}.safetensors"
