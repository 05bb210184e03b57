"""The Models lab: what the page model's family adds, the same prompt through a second model, and the device.

The tab shows the family card of the page's model (`inspector.viz.models.family_html`: its additions to a
Llama block, its local and global layers with the window and RoPE bases) and a picker of a second model
(`inspector.models.catalog.MODEL_KEYS`: the default SmolLM2-135M-Instruct and Gemma 3 270M, downloaded and
converted on first use, then kept in this process for every browser, its weights counted by admission as a
shared model's are). Compare runs the page's prompt through
both: their tokenizations and next-token distributions side by side (`inspector.session.compare.next_tokens`,
one prefill each on a fresh cache; nothing is kept). A model without a chat template (Gemma 3 270M is a base
model) gets the plain prompt, and the status says so.

A device picker offers the devices this machine has (cpu, and cuda / mps where present); picking one and
pressing Load reloads the page's model there (`app_model.reload_on_device`) and starts every browser's
session afresh on it (their caches and records were made by the old weights); it waits for no one: while any
session runs a model call it is refused in one line. The views' data stays on the CPU whatever the device.
Caps are checked before any model work (`admit_prompt` on the page's model); loading runs on the prefill
thread, the forwards on the model threads, under this browser's lock.
"""

from __future__ import annotations

import threading
from typing import Any

from inspector.errors import InputError
from inspector.models.catalog import DEFAULT_KEY, MODEL_KEYS, MODELS, describe
from inspector.session.compare import family_card, next_tokens
from inspector.session.devices import available_devices
from inspector.ui import model_thread
from inspector.ui.admission import Reservation, admit_process_memory, admit_prompt
from inspector.ui.app_model import reload_on_device
from inspector.ui.panel import Page, Panel
from inspector.ui.refusals import refuses
from inspector.viz.models import family_html, side_by_side_html

_loaded: dict[str, Any] = {}  # model key -> LoadedModel, shared by every browser of this process
_loading = threading.Lock()


class ModelsLab(Panel):
    key, title, tab_id = "models", "Models", "tab-models"
    status_id = "models-status-line"

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self.device = DeviceSection(page)

    def second_model(self, key: str) -> Any:
        """The LoadedModel for `key` (the page's own model when it is that one), loaded once per process."""
        from inspector.models.loader import load_model

        loaded = self.page.loaded
        if key not in MODEL_KEYS:
            raise InputError(f"unknown model {key!r}: choose one of {', '.join(MODEL_KEYS)}")
        if key == DEFAULT_KEY and loaded.name == MODELS[DEFAULT_KEY].name:
            return loaded  # the page already runs it
        with _loading:
            if key not in _loaded:  # the second model's weights are held for the process: admitted as such
                need = MODELS[key].params * loaded.dtype.itemsize
                admit_process_memory(self.page.store, self.page.limits, need)
                _loaded[key] = load_model(key, dtype=loaded.dtype, device=getattr(loaded, "device", "cpu"))
                self.page.store.shared[f"{self.key}:{key}"] = Reservation(need)
            return _loaded[key]

    def layout(self) -> None:
        import gradio as gr

        loaded = self.page.loaded
        gr.HTML(family_html(family_card(loaded)))
        with gr.Row():
            self.pick = gr.Dropdown([(describe(k), k) for k in MODEL_KEYS], value=MODEL_KEYS[-1],
                                    label="second model (side by side with the page's model)", elem_id="models-pick")
            self.go_btn = gr.Button("Compare the prompt", elem_id="models-compare")
        self.show("status", gr.HTML(self.status("Compare runs the page's prompt through both models")))
        self.show("side", gr.HTML('<div id="side-by-side"></div>'))
        self.device.layout()

    def wire(self) -> None:
        p = self.page
        self.device.wire()
        self.on(self.go_btn.click, self.compare, [p.sid, self.pick, p.prompt, p.chat, p.system], ["status", "side"],
                show_progress="minimal")

    @refuses
    def compare(self, sid: str | None, key: Any, prompt: Any, chat: Any, system: Any) -> dict[str, Any]:
        loaded = self.page.loaded
        admitted = admit_prompt(loaded, self.page.limits, prompt, bool(chat), system)  # every cap first
        _, visitor = self.page.store.get_or_create(sid)
        with visitor.exclusive(self.key):
            other = model_thread.call_prefill(self.second_model, str(key))
            chat_other = bool(chat) and bool(other.tokenizer.chat_template)
            system_text = system if system else None
            left = model_thread.call(next_tokens, loaded, prompt, bool(chat), system=system_text)
            right = model_thread.call(next_tokens, other, prompt, chat_other, system=system_text if chat_other else None)
        note = "" if chat_other == bool(chat) else f"; {other.name} has no chat template, so it reads the plain prompt"
        return {"status": self.status(f"{len(admitted.ids)} and {len(right.ids)} prompt tokens{note}"),
                "side": side_by_side_html(left, right)}



class DeviceSection(Panel):
    """Part of the Models lab: the device picker (see the module docstring)."""

    key, title, tab_id = "device", "Device", "device-pick"
    status_id = "device-status-line"

    def layout(self) -> None:
        import gradio as gr

        loaded = self.page.loaded
        with gr.Row():
            self.device = gr.Dropdown(available_devices(), value=loaded.device, allow_custom_value=True,
                                      label="device (the devices this machine has)", elem_id=self.tab_id)
            self.load_btn = gr.Button("Load the model on this device", elem_id="device-load")
        self.show("status", gr.HTML(self.status(f"the model runs on {loaded.device}")))

    def wire(self) -> None:
        self.on(self.load_btn.click, self.switch_device, [self.page.sid, self.device], show_progress="minimal")

    @refuses
    def switch_device(self, sid: str | None, device: Any) -> dict[str, Any]:
        """Reload the page's model on `device` and reset every session on it (one line when refused)."""
        device = str(device or "").strip()
        loaded, store = self.page.loaded, self.page.store
        held = []
        try:
            for visitor in store.live():
                if not visitor.lock.acquire(blocking=False):
                    raise InputError("a session is running a model call (a step, Play or a lab): try again when it "
                                     "ends")
                held.append(visitor)
            if not model_thread.call_prefill(reload_on_device, loaded, device):
                return {"status": self.status(f"the model is already on {loaded.device}")}
            for visitor in held:  # their caches and records belong to the old weights
                store.reset_locked(visitor)
                visitor.labs.clear()
            with _loading:
                _loaded.clear()  # second models load again beside the page model, on its new device
                for shared in [k for k in store.shared if k.startswith("models:")]:
                    del store.shared[shared]
        finally:
            for visitor in held:
                visitor.lock.release()
        return {"status": self.status(f"{loaded.name} now runs on {loaded.device}; every session starts afresh: "
                                      "press Prefill")}
