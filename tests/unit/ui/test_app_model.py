"""Which model the app loads (INSPECTOR_MODEL, the Hub on Spaces with the embedded fallback, the default
elsewhere) and the caps read from the environment. `load_model` is replaced by a recorder: no model loads."""

from __future__ import annotations

import logging

import pytest

import inspector.ui.app_model as app_model
from inspector.ui.app_model import HUB_MODEL_ID, AppLimits, app_limits, load_app_model
from inspector.errors import InputError, ModelLoadError

SPACE_VARS = ("SYSTEM", "SPACE_ID", "INSPECTOR_MODEL")


class Recorder(list):
    """The sources load_model was called with; a source in `fail` raises ModelLoadError."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: set = set()

    def __call__(self, source=None, device=None):
        self.append(source)
        self.device = device
        if source in self.fail:
            raise ModelLoadError(f"{source!r}: the Hugging Face Hub did not provide it: offline\nsecond line")
        return f"loaded:{source}"


@pytest.fixture
def calls(monkeypatch) -> Recorder:
    recorder = Recorder()
    for var in SPACE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(app_model, "load_model", recorder)
    return recorder


def test_locally_the_embedded_default(calls):
    assert load_app_model() == "loaded:None"
    assert calls == [None]


def test_the_device_comes_from_inspector_device(calls, monkeypatch):
    monkeypatch.delenv("INSPECTOR_DEVICE", raising=False)
    assert load_app_model() == "loaded:None" and calls.device is None
    monkeypatch.setenv("INSPECTOR_DEVICE", "cuda")
    load_app_model()
    assert calls.device == "cuda"


@pytest.mark.parametrize("var, value", [("SYSTEM", "spaces"), ("SPACE_ID", "someone/inspector")])
def test_on_spaces_the_hub_model_first(calls, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    assert load_app_model() == f"loaded:{HUB_MODEL_ID}"
    assert calls == [HUB_MODEL_ID]


def test_on_spaces_falls_back_to_the_default_and_says_why(calls, monkeypatch, caplog):
    monkeypatch.setenv("SYSTEM", "spaces")
    calls.fail.add(HUB_MODEL_ID)
    with caplog.at_level(logging.WARNING, logger="inspector.ui.app_model"):
        assert load_app_model() == "loaded:None"
    assert calls == [HUB_MODEL_ID, None]
    (record,) = caplog.records
    assert HUB_MODEL_ID in record.getMessage() and "offline" in record.getMessage()
    assert "second line" not in record.getMessage()


def test_inspector_model_wins_and_its_errors_propagate(calls, monkeypatch):
    monkeypatch.setenv("SYSTEM", "spaces")
    monkeypatch.setenv("INSPECTOR_MODEL", "/models/mine")
    assert load_app_model() == "loaded:/models/mine"
    calls.fail.add("/models/mine")
    with pytest.raises(ModelLoadError):
        load_app_model()
    assert calls == ["/models/mine", "/models/mine"]  # no silent fallback for an explicit choice


def test_limits_defaults_and_overrides(monkeypatch):
    for name in AppLimits.__dataclass_fields__:
        monkeypatch.delenv(f"INSPECTOR_{name.upper()}", raising=False)
    assert app_limits() == AppLimits()
    monkeypatch.setenv("INSPECTOR_MAX_SESSIONS", "3")
    monkeypatch.setenv("INSPECTOR_MAX_STEPS", " 40 ")
    limits = app_limits()
    assert (limits.max_sessions, limits.max_steps) == (3, 40)
    assert limits.max_prompt_tokens == AppLimits().max_prompt_tokens


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_limits_reject_bad_values_in_one_line(monkeypatch, value):
    monkeypatch.setenv("INSPECTOR_MAX_SESSIONS", value)
    with pytest.raises(InputError, match=r"^INSPECTOR_MAX_SESSIONS must be a positive integer, got ") as info:
        app_limits()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("var, value, message", [
    ("INSPECTOR_MODEL", "/nonexistent/model-dir", "error: model source not found: /nonexistent/model-dir"),
    ("INSPECTOR_MAX_SESSIONS", "many", "error: INSPECTOR_MAX_SESSIONS must be a positive integer, got 'many'"),
    ("INSPECTOR_RUN_AHEAD", "yes", "error: INSPECTOR_RUN_AHEAD must be 0 or 1, got 'yes'"),
    ("INSPECTOR_DECODE_THREADS", "0", "error: INSPECTOR_DECODE_THREADS must be a positive integer, got '0'"),
])
def test_app_py_reports_a_bad_setting_in_one_line(var, value, message):
    """`python app.py` with a wrong model path or cap: one line on stderr, exit 1, no traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, var: value, "GRADIO_SERVER_PORT": "1"}  # port 1: it must never get as far as launching
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "app.py"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message)
    assert "Traceback" not in proc.stderr + proc.stdout


def test_app_py_checks_its_settings_before_loading_the_model():
    """A bad INSPECTOR_* setting is refused before the model loads (a first start would convert it first):
    with a model path that does not exist as well, the setting is what `python app.py` names."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "INSPECTOR_MODEL": "/nonexistent/model-dir", "INSPECTOR_RUN_AHEAD": "yes",
           "GRADIO_SERVER_PORT": "1"}
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "app.py"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: INSPECTOR_RUN_AHEAD must be 0 or 1, got 'yes'"


def test_app_py_names_a_bad_setting_before_importing_torch_or_gradio():
    """`python app.py` checks the settings (`check_settings`) before the imports that take seconds."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    run = ("import runpy, sys\n"
           "try:\n    runpy.run_path('app.py', run_name='__main__')\n"
           "except SystemExit as exc:\n    print(exc.code)\n"
           "print('torch' in sys.modules, 'gradio' in sys.modules)")
    env = {**os.environ, "INSPECTOR_MAX_STEPS": "-1", "GRADIO_SERVER_PORT": "1"}
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", run], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.stdout.splitlines() == ["error: INSPECTOR_MAX_STEPS must be a positive integer, got '-1'",
                                        "False False"], proc.stdout + proc.stderr
