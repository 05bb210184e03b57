"""The system prompt a chat run actually uses, shown under its box.

A chat template may add a default system prompt when none is given (SmolLM2's names the model); the page
applies it but the box stays empty. `template_system(tokenizer)` finds out from the template itself what it
does: render one user turn with a marker as the system prompt and once without any, and read the default
from where the marker was. `system_note_html(tokenizer, chat, system)` is the line the page shows: the text
that will be used (the box's, else the template's default), or that none is (chat off, a template with no
system prompt, or one that ignores it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.viz.common import esc

MARK = "\u2063SYSTEM-PROMPT-MARK\u2063"  # text no template rewrites (an invisible separator around a word)


@dataclass(frozen=True)
class TemplateSystem:
    """What a chat template does with a system prompt."""

    has_template: bool  # the model has a chat template at all
    supported: bool  # a given system prompt reaches the model's input
    default: str | None  # what it uses when none is given (None: nothing)


def template_system(tokenizer: Any) -> TemplateSystem:
    """Read the template's handling of a system prompt by rendering it (no model work)."""
    if not getattr(tokenizer, "has_chat_template", False):
        return TemplateSystem(False, False, None)
    user = "hello"
    try:
        marked = tokenizer.render_chat(user, system=MARK)
        plain = tokenizer.render_chat(user)
    except Exception:  # noqa: BLE001 - a template that refuses a system turn raises its own error
        return TemplateSystem(True, False, None)
    if MARK not in marked:
        return TemplateSystem(True, False, None)
    before, after = marked.split(MARK, 1)
    if plain.startswith(before) and plain.endswith(after) and len(plain) >= len(before) + len(after):
        default = plain[len(before):len(plain) - len(after)]
        return TemplateSystem(True, True, default or None)
    return TemplateSystem(True, True, None)


def system_note_html(info: TemplateSystem, chat: bool, system: Any) -> str:
    """One line under the system prompt box: what the next run's chat template gets as its system prompt."""
    given = system.strip() if isinstance(system, str) else ""

    def note(kind: str, text: str) -> str:
        return f'<div id="system-note" class="ii-muted" data-system="{kind}">{text}</div>'

    if not chat:
        return note("off", "Chat template off: the prompt is sent as plain text, with no system prompt.")
    if not info.has_template:
        return note("none", "This model has no chat template, so there is no system prompt.")
    if not info.supported:
        return note("none", "This model's chat template has no system prompt: the box is not used.")
    if given:
        return note("given", f"System prompt used: the text in the box ({len(given)} characters).")
    if info.default:
        return note("default", "System prompt used (the chat template's default, while the box is empty): "
                               f"<q id=\"system-default\">{esc(info.default)}</q>")
    return note("empty", "No system prompt: the box is empty and the chat template adds none by default.")


def chat_checkbox(tokenizer: Any) -> Any:
    """The "Chat template" tick for the loaded model: ticked when the model has a chat template; unticked and
    disabled, saying why, when it has none (a base model such as Gemma 3 270M reads the plain prompt)."""
    import gradio as gr

    if getattr(tokenizer, "has_chat_template", False):
        return gr.Checkbox(True, label="Chat template", elem_id="chat-toggle", min_width=120)
    return gr.Checkbox(False, label="Chat template (this model has none: a base model reads the plain prompt)",
                       interactive=False, elem_id="chat-toggle", min_width=120)
