"""`TabContext`: what a lab tab (Speculative, Quantization, Serving) gets from the page to build itself.

A lab tab is one module `inspector/ui/<lab>_tab.py` with `build_<lab>_tab(ctx: TabContext) -> None`, called
by `build_app` inside the page's `gr.Tabs()`. It lays out its own controls and outputs and wires its own
events; it reads the page's shared inputs (prompt, chat, system prompt, sampling controls, max new tokens)
from `ctx`, and keeps its per-browser state in the session store under its own key (`lab_state`), so the
state is freed with the browser session (time-to-live, eviction, page unload).

The rules of the page hold for a lab tab too:
- Every cap is checked before model work (`inspector.ui.admission`: prompt characters and tokens, the
  context window, max new tokens against `limits.max_steps`).
- Model work runs on a model thread (`inspector.ui.model_thread.run` / `run_prefill`), never on a Gradio
  worker thread, and under the entry's lock (`Entry.exclusive`), so one browser runs one model call at a time.
- Bad input or a refused request puts one line in the tab's status; handlers never raise.
- No tensor math in the handlers: figures come from pure builders in `inspector.viz`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.ui.app_model import AppLimits
from inspector.ui.sessions import Entry, SessionStore


@dataclass(frozen=True)
class TabContext:
    """The page's shared pieces a lab tab builds on (components are Gradio components of the page)."""

    loaded: Any  # inspector.models.loader.LoadedModel: the page's model, shared by every session
    store: SessionStore
    limits: AppLimits
    sid: Any  # gr.State holding the browser session id (set at page load)
    prompt: Any  # gr.Textbox
    chat: Any  # gr.Checkbox
    system: Any  # gr.Textbox
    sampling: tuple  # (temperature, top_k, top_p, min_p, seed) components, as `fields.sampling_params` takes them
    max_new: Any  # gr.Number


def lab_state(ctx: TabContext, sid: str | None, lab: str, factory: Any = dict) -> tuple[Entry, Any]:
    """This browser session's entry and its state for `lab` (made by `factory()` on first use). Raises
    SessionCapError when the server has no free session slot."""
    _, entry = ctx.store.get_or_create(sid)
    if lab not in entry.labs:
        entry.labs[lab] = factory()
    return entry, entry.labs[lab]
