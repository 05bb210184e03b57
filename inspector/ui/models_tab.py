"""The Models tab: what the page model's family adds, and the same prompt through a second model.

`build_models_tab(ctx)` shows the family card of the page's model (`inspector.viz.models.family_html`:
its additions to a Llama block, its local and global layers with the window and RoPE bases) and a picker
of a second model (`inspector.models.catalog.MODEL_KEYS`: the default SmolLM2-135M-Instruct and Gemma 3
270M, downloaded and converted on first use, then kept in this process for every browser). Compare runs
the page's prompt through both: their tokenizations and next-token distributions side by side
(`inspector.session.compare.next_tokens`, one prefill each on a fresh cache; nothing is kept). A model
without a chat template (Gemma 3 270M is a base model) gets the plain prompt, and the status says so.

A device picker offers the devices this machine has (`inspector.engine.devices.available_devices`: cpu,
and cuda / mps where present); picking one and pressing Load reloads the page's model there
(`app_model.reload_on_device`) and starts every browser's session afresh on it (their caches and records
were made by the old weights); it waits for no one: while any session runs a model call it is refused in
one line. The views' data stays on the CPU whatever the device (the recorders copy it there).

Caps are checked before any model work (`admit_prompt` on the page's model); loading runs on the prefill
thread, the forwards on the model threads, under this browser's lock (`entry.exclusive`). Bad input or a
failed download is one line in the tab's status (`shows_refusals`).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import gradio as gr

from inspector.engine.devices import available_devices
from inspector.errors import InputError
from inspector.models.catalog import DEFAULT_KEY, MODEL_KEYS, MODELS, describe
from inspector.session.compare import family_card, next_tokens
from inspector.ui import model_thread
from inspector.ui.admission import admit_prompt
from inspector.ui.app_model import reload_on_device
from inspector.ui.refusals import shows_refusals
from inspector.ui.tab_context import TabContext, lab_state
from inspector.viz.common import status_line_html
from inspector.viz.models import family_html, side_by_side_html

LAB = "models"
_loaded: dict[str, Any] = {}  # model key -> LoadedModel, shared by every browser of this process
_loading = threading.Lock()


def status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "models-status-line")


def second_model(ctx: TabContext, key: str) -> Any:
    """The LoadedModel for `key` (the page's own model when it is that one), loaded once per process."""
    from inspector.models.loader import load_model

    if key not in MODEL_KEYS:
        raise InputError(f"unknown model {key!r}: choose one of {', '.join(MODEL_KEYS)}")
    if key == DEFAULT_KEY and ctx.loaded.name == MODELS[DEFAULT_KEY].name:
        return ctx.loaded  # the page already runs it
    with _loading:
        if key not in _loaded:
            _loaded[key] = load_model(key, dtype=ctx.loaded.dtype, device=getattr(ctx.loaded, "device", "cpu"))
        return _loaded[key]


@shows_refusals(lambda message, *_: (status_html(message, error=True), gr.skip()))
def compare(ctx: TabContext, sid: str | None, key: Any, prompt: Any, chat: Any, system: Any) -> tuple:
    admitted = admit_prompt(ctx.loaded, ctx.limits, prompt, bool(chat), system)  # every cap first
    entry, _ = lab_state(ctx, sid, LAB)
    with entry.exclusive(LAB):
        other = model_thread.run_prefill(second_model, ctx, str(key))
        chat_other = bool(chat) and bool(other.tokenizer.chat_template)
        system_text = system if system else None
        left = model_thread.run(next_tokens, ctx.loaded, prompt, bool(chat), system=system_text)
        right = model_thread.run(next_tokens, other, prompt, chat_other, system=system_text if chat_other else None)
    note = "" if chat_other == bool(chat) else f"; {other.name} has no chat template, so it reads the plain prompt"
    return (status_html(f"{len(admitted.ids)} and {len(right.ids)} prompt tokens{note}"),
            side_by_side_html(left, right))


def device_status_html(message: str, error: bool = False) -> str:
    return status_line_html(message, error, "device-status-line")


@shows_refusals(lambda message, *_: device_status_html(message, error=True))
def switch_device(ctx: TabContext, device: Any) -> str:
    """Reload the page's model on `device` and reset every session on it (one line when refused)."""
    device = str(device or "").strip()
    held = []
    try:
        for entry in ctx.store.entries():
            if not entry.lock.acquire(blocking=False):
                raise InputError("a session is running a model call (a step, Play or a lab): try again when it ends")
            held.append(entry)
        if not model_thread.run_prefill(reload_on_device, ctx.loaded, device):
            return device_status_html(f"the model is already on {ctx.loaded.device}")
        for entry in held:  # their caches and records belong to the old weights
            ctx.store.reset_locked(entry)
            entry.labs.clear()
        with _loading:
            _loaded.clear()  # second models load again beside the page model, on its new device
    finally:
        for entry in held:
            entry.lock.release()
    return device_status_html(f"{ctx.loaded.name} now runs on {ctx.loaded.device}; every session starts afresh: press Prefill")


def build_models_tab(ctx: TabContext) -> None:
    with gr.Tab("Models", elem_id="tab-models"):
        gr.HTML(family_html(family_card(ctx.loaded)))
        with gr.Row():
            pick = gr.Dropdown([(describe(k), k) for k in MODEL_KEYS], value=MODEL_KEYS[-1],
                               label="second model (side by side with the page's model)", elem_id="models-pick")
            go_btn = gr.Button("Compare the prompt", elem_id="models-compare")
        status = gr.HTML(status_html("Compare runs the page's prompt through both models"))
        out = gr.HTML('<div id="side-by-side"></div>')
        with gr.Row():
            device = gr.Dropdown(available_devices(), value=ctx.loaded.device, allow_custom_value=True,
                                 label="device (the devices this machine has)", elem_id="device-pick")
            load_btn = gr.Button("Load the model on this device", elem_id="device-load")
        device_status = gr.HTML(device_status_html(f"the model runs on {ctx.loaded.device}"))
        load_btn.click(partial(switch_device, ctx), [device], [device_status], show_progress="minimal",
                       api_visibility="undocumented")
        go_btn.click(partial(compare, ctx), [ctx.sid, pick, ctx.prompt, ctx.chat, ctx.system], [status, out],
                     show_progress="minimal", api_visibility="undocumented")
