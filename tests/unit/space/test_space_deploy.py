"""Deploying the Space, against fakes of the Hub: a recording double of HfApi (the calls and their
arguments), and a local HTTP server speaking the Hub's API to the real `huggingface_hub` client driven
through the `inspector space deploy` CLI (what was uploaded, byte for byte; the error lines)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from inspector.space.bundle import build_bundle, bundle_files
from inspector.space.deploy import STALE_PATTERNS, SpaceDeployError, deploy_space
from harness.net import free_port


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("deploy") / "bundle"
    build_bundle(dest)
    return dest


# ---- a recording double of HfApi
class RecordingApi:
    endpoint = "https://hub.example"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.uploaded: list[str] = []

    def create_repo(self, repo_id, **kwargs):
        from huggingface_hub.hf_api import RepoUrl

        self.calls.append(("create_repo", (repo_id,), kwargs))
        return RepoUrl(f"https://huggingface.co/spaces/{repo_id}")

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", (), kwargs))
        self.uploaded = bundle_files(kwargs["folder_path"])  # what is on disk at upload time


def test_deploy_creates_a_gradio_space_then_uploads_the_bundle(bundle):
    api = RecordingApi()
    url = deploy_space(bundle, "someone/inspector", token="hf_test", api=api)
    assert url == "https://huggingface.co/spaces/someone/inspector"
    assert [name for name, _, _ in api.calls] == ["create_repo", "upload_folder"]
    _, args, create = api.calls[0]
    assert args == ("someone/inspector",)
    assert create["repo_type"] == "space" and create["space_sdk"] == "gradio" and create["exist_ok"] is True
    assert create["token"] == "hf_test" and create["private"] is None  # visibility untouched unless asked
    _, _, upload = api.calls[1]
    assert upload["repo_id"] == "someone/inspector" and upload["repo_type"] == "space"
    assert Path(upload["folder_path"]) == bundle and upload["token"] == "hf_test"
    assert upload["delete_patterns"] == STALE_PATTERNS
    assert api.uploaded == bundle_files(bundle)
    assert {"README.md", "app.py", "requirements.txt", "inspector/__init__.py"} <= set(api.uploaded)


def test_private_is_passed_on_creation(bundle):
    api = RecordingApi()
    deploy_space(bundle, "someone/inspector", token="hf_test", private=True, api=api)
    assert api.calls[0][2]["private"] is True


def test_a_folder_that_is_not_a_bundle_is_refused(tmp_path):
    api = RecordingApi()
    with pytest.raises(SpaceDeployError, match="not a Space bundle"):
        deploy_space(tmp_path, "someone/inspector", token="hf_test", api=api)
    assert api.calls == []


@pytest.mark.parametrize("repo_id", ["inspector", "a/b/c", "someone/", "some one/x"])
def test_a_malformed_space_id_is_refused_before_any_call(bundle, repo_id):
    api = RecordingApi()
    with pytest.raises(SpaceDeployError, match="invalid Space id"):
        deploy_space(bundle, repo_id, token="hf_test", api=api)
    assert api.calls == []


# ---- a fake Hub over HTTP, for the real client
class FakeHub(ThreadingHTTPServer):
    """Enough of the Hub's REST API for create_repo + upload_folder of small (non-LFS) files."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeHubHandler)
        self.requests: list[tuple[str, str, dict, bytes]] = []  # method, path, headers, body
        self.existing = ["README.md", "inspector/old_module.py", ".gitattributes"]  # an earlier deploy
        self.refuse_token = False
        self.created: dict | None = None
        self.committed: dict[str, bytes] = {}
        self.deleted: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeHubHandler(BaseHTTPRequestHandler):
    server: FakeHub

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, payload) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self) -> bytes:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        return body

    def do_GET(self) -> None:
        self._record()
        if "/tree/main" in self.path:
            return self._reply(200, [{"type": "file", "path": p, "oid": "0" * 40, "size": 1}
                                     for p in self.server.existing])
        self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self._record()
        hub = self.server
        if self.path == "/api/repos/create":
            if hub.refuse_token:
                return self._reply(401, {"error": "Invalid credentials in Authorization header"})
            hub.created = json.loads(body)
            space = f"{hub.created['organization']}/{hub.created['name']}"
            return self._reply(200, {"url": f"{hub.url}/spaces/{space}"})
        if self.path == "/api/validate-yaml":
            return self._reply(200, {"errors": [], "warnings": []})
        if "/preupload/" in self.path:
            files = json.loads(body)["files"]
            return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                               for f in files]})
        if "/commit/" in self.path:
            for line in body.decode().splitlines():
                op = json.loads(line)
                if op["key"] == "file":
                    hub.committed[op["value"]["path"]] = base64.b64decode(op["value"]["content"])
                elif op["key"] == "deletedFile":
                    hub.deleted.append(op["value"]["path"])
            return self._reply(200, {"commitUrl": f"{hub.url}/spaces/x/y/commit/{'a' * 40}",
                                     "commitOid": "a" * 40, "success": True})
        self._reply(404, {"error": "not found"})


@pytest.fixture
def hub():
    server = FakeHub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def cli(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run `inspector ...` in a fresh interpreter (huggingface_hub reads HF_* variables at import)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    base.update(HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1", **env)
    return subprocess.run([sys.executable, "-m", "inspector.commands.cli", *args], capture_output=True, text=True,
                          env=base, timeout=300)


def assert_one_error_line(proc: subprocess.CompletedProcess, starts: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), proc.stderr


def test_cli_deploy_uploads_the_built_bundle_to_the_hub(hub, tmp_path):
    bundle = tmp_path / "expected"
    build_bundle(bundle)  # built just before the CLI builds its own, from the same sources
    proc = cli(["space", "deploy", "someone/inspector"], tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN="hf_fake")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{hub.url}/spaces/someone/inspector"
    assert hub.created == {"name": "inspector", "organization": "someone", "type": "space", "sdk": "gradio"}
    space_calls = [headers for _, path, headers, _ in hub.requests if path.startswith("/api/spaces")]
    assert space_calls and all(h.get("authorization") == "Bearer hf_fake" for h in space_calls)
    # the CLI built its own bundle in a temporary folder: same files, same bytes as a fresh build
    assert sorted(hub.committed) == bundle_files(bundle)
    for rel, data in hub.committed.items():
        assert data == (bundle / rel).read_bytes(), rel
    assert hub.deleted == ["inspector/old_module.py"]  # a module gone from the package does not linger


def test_cli_deploy_of_a_built_folder(hub, tmp_path, bundle):
    proc = cli(["space", "deploy", "someone/inspector", "--dir", str(bundle), "--private"], tmp_path,
               HF_ENDPOINT=hub.url, HF_TOKEN="hf_fake")
    assert proc.returncode == 0, proc.stderr
    # huggingface_hub 1.x sends "private": true, 2.x "visibility": "private"
    assert hub.created.get("private") is True or hub.created.get("visibility") == "private", hub.created
    assert sorted(hub.committed) == bundle_files(bundle)


def test_cli_without_a_token_says_so_in_one_line(hub, tmp_path):
    proc = cli(["space", "deploy", "someone/inspector"], tmp_path, HF_ENDPOINT=hub.url)
    assert_one_error_line(proc, "error: no Hugging Face token: pass --token")
    assert hub.requests == []  # failed before building or calling anything


def test_cli_with_the_hub_unreachable_says_so_in_one_line(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = cli(["space", "deploy", "someone/inspector", "--token", "hf_fake"], tmp_path, HF_ENDPOINT=endpoint)
    assert_one_error_line(proc, f"error: could not reach the Hugging Face Hub at {endpoint}")


def test_cli_offline_mode_says_so_in_one_line(tmp_path):
    proc = cli(["space", "deploy", "someone/inspector", "--token", "hf_fake"], tmp_path, HF_HUB_OFFLINE="1")
    assert_one_error_line(proc, "error: could not reach the Hugging Face Hub")
    assert "offline" in proc.stderr


def test_cli_with_a_refused_token_says_so_in_one_line(hub, tmp_path):
    hub.refuse_token = True
    proc = cli(["space", "deploy", "someone/inspector", "--token", "hf_bad"], tmp_path, HF_ENDPOINT=hub.url)
    assert_one_error_line(proc, "error: the Hub refused the token (HTTP 401)")
    assert hub.committed == {}


def test_cli_build_writes_the_bundle_and_refuses_a_full_folder(tmp_path, bundle):
    dest = tmp_path / "space"
    proc = cli(["space", "build", str(dest)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"({len(bundle_files(bundle))} files)" in proc.stdout
    assert bundle_files(dest) == bundle_files(bundle)
    again = cli(["space", "build", str(dest)], tmp_path)
    assert_one_error_line(again, "error: ")
    assert "--overwrite" in again.stderr
