"""Publish a built Space folder to the Hugging Face Hub: create the Space (Gradio SDK) if needed, upload.

`deploy_space(folder, repo_id, token=..., private=..., api=...)` calls
`create_repo(repo_id, repo_type="space", space_sdk="gradio", exist_ok=True)` then `upload_folder` and
returns the Space's URL. Every failure the user can fix (no token, a bad repo id, the Hub refusing the
token, no network) raises `SpaceDeployError` with one line. `api` is any object with HfApi's
`create_repo` / `upload_folder` / `endpoint` (tests pass a recording double).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from inspector.errors import InspectorError, first_line

# Files from an earlier upload that the new bundle no longer has are deleted under these folders
# (so a removed module cannot linger on the Space); README, app.py, requirements are overwritten anyway.
STALE_PATTERNS = ["inspector/**", "static/**"]


class SpaceDeployError(InspectorError):
    """The Space could not be created or uploaded; the message says why in one line."""


def _network_errors() -> tuple[type[BaseException], ...]:
    """Transport-level errors across huggingface_hub versions (requests, httpx or httpx2 underneath)."""
    errors: list[type[BaseException]] = [OSError]  # ConnectionError, OfflineModeIsEnabled, requests' errors
    for module in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)



def check_repo_id(repo_id: str) -> str:
    """`repo_id` if it reads as owner/name (the Hub validates the details); SpaceDeployError otherwise."""
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", repo_id):
        raise SpaceDeployError(f"invalid Space id {repo_id!r}: expected owner/name, e.g. you/inference-inspector")
    return repo_id


def resolve_token(token: str | None) -> str:
    """The token to use: `token`, else HF_TOKEN / the stored login. SpaceDeployError when there is none."""
    from huggingface_hub import get_token

    token = token or get_token()
    if not token:
        raise SpaceDeployError("no Hugging Face token: pass --token, set HF_TOKEN, or run `hf auth login` "
                               "(the token needs write access)")
    return token


def deploy_space(folder: str | Path, repo_id: str, *, token: str | None = None, private: bool = False,
                 api: Any = None) -> str:
    """Create (if missing) and upload the Space `repo_id` from the bundle `folder`; returns its URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    check_repo_id(repo_id)
    folder = Path(folder)
    if not (folder / "README.md").is_file() or not (folder / "app.py").is_file():
        raise SpaceDeployError(f"{folder} is not a Space bundle (no README.md / app.py); "
                               "build one with `inspector space build DIR`")
    token = resolve_token(token)
    api = api if api is not None else HfApi()
    endpoint = getattr(api, "endpoint", "the Hub")
    try:
        repo_url = api.create_repo(repo_id, token=token, private=private or None, repo_type="space",
                                   space_sdk="gradio", exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="space", token=token,
                          commit_message="Deploy Inference Inspector", delete_patterns=STALE_PATTERNS)
    except HFValidationError as exc:
        raise SpaceDeployError(f"invalid Space id {repo_id!r} (expected owner/name): {first_line(exc)}") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise SpaceDeployError(f"the Hub refused the token (HTTP {status}) for {repo_id}: "
                                   "check it has write access to that namespace") from None
        raise SpaceDeployError(f"the Hub rejected the deploy of {repo_id}: {first_line(exc)}") from None
    except _network_errors() as exc:
        raise SpaceDeployError(f"could not reach the Hugging Face Hub at {endpoint} "
                               f"({type(exc).__name__}: {first_line(exc)}); check your network") from None
    url = getattr(repo_url, "url", None) or str(repo_url)
    return url if "/spaces/" in url else f"https://huggingface.co/spaces/{repo_id}"
