"""The decoding controls of the page's sampling settings panel: penalties, bans, stop strings, a grammar
constraint and beam search, as `DecodingSettings`.

`build_decoding_controls()` lays the controls out (inside the settings accordion) and returns them as a
`DecodingControls`; `controls.inputs` is the list every handler takes, in `settings_from_controls`' order.
Numbers are typed into text boxes and parsed with the CLI's bounds (`inspector.generation.settings`),
so an empty or bad box is one line naming what is allowed, never a Gradio preprocessing error. Lists are
one item per line (bad words, stop strings, choices) or `ID=V` pairs separated by commas or lines (logit
bias).

Applying: `apply(store, sid, *values)` (the controls' change events) keeps the settings in this browser
session's visitor (`visitor.decoding`) and hands them to its run from the next draw on; a new
Prefill starts with them (`step_settings(visitor)`, read by the prefill handler). The step-by-step run
ignores the beam settings: the Beams tab runs beam search on its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from inspector.errors import InputError, InspectorError, first_line
from inspector.session import settings as gs
from inspector.session.settings import DecodingSettings, check_grammar
from inspector.ui.panel import NO_LOADING_STATUS
from inspector.viz.common import esc, status_line_html

CONSTRAINTS = ["none", "JSON schema", "regex", "choice"]


@dataclass(frozen=True)
class DecodingControls:
    repetition_penalty: Any
    presence_penalty: Any
    frequency_penalty: Any
    no_repeat_ngram_size: Any
    logit_bias: Any
    bad_words: Any
    min_new_tokens: Any
    stop: Any
    constraint_kind: Any
    constraint_text: Any
    num_beams: Any
    length_penalty: Any
    status: Any

    @property
    def inputs(self) -> list:
        return [self.repetition_penalty, self.presence_penalty, self.frequency_penalty, self.no_repeat_ngram_size,
                self.logit_bias, self.bad_words, self.min_new_tokens, self.stop, self.constraint_kind,
                self.constraint_text, self.num_beams, self.length_penalty]


def _lines(text: Any) -> tuple[str, ...]:
    return tuple(line for line in str(text or "").splitlines() if line.strip())


def settings_from_controls(rep: Any, pres: Any, freq: Any, ngram: Any, bias: Any, bad: Any, min_new: Any, stop: Any,
                           kind: Any, text: Any, beams: Any, length_penalty: Any, *,
                           for_beams: bool = False) -> DecodingSettings:
    """The controls' values as settings, validated for a step-by-step run (beam settings aside) or, with
    `for_beams`, for beam search; InputError (one line) on a bad value."""
    kind = kind or "none"
    if kind not in CONSTRAINTS:
        raise InputError(f"constraint must be one of {', '.join(CONSTRAINTS)}, got {str(kind)[:40]!r}")
    text = str(text or "")
    if kind != "none" and not text.strip():
        raise InputError(f"the {kind} constraint is empty: give the {kind} (or choose constraint none)")
    settings = DecodingSettings(
        repetition_penalty=gs.REPETITION_PENALTY.parse(rep), presence_penalty=gs.PRESENCE_PENALTY.parse(pres),
        frequency_penalty=gs.FREQUENCY_PENALTY.parse(freq), no_repeat_ngram_size=gs.NO_REPEAT_NGRAM.parse(ngram),
        logit_bias=gs.parse_logit_bias([b for b in re.split(r"[,\n]", str(bias or "")) if b.strip()]),
        bad_words=_lines(bad), min_new_tokens=gs.MIN_NEW_TOKENS.parse(min_new), stop=_lines(stop),
        num_beams=gs.NUM_BEAMS.parse(beams), length_penalty=gs.LENGTH_PENALTY.parse(length_penalty),
        json_schema=text if kind == "JSON schema" else "", regex=text.strip() if kind == "regex" else "",
        choices=_lines(text) if kind == "choice" else ())
    settings.validate()
    if for_beams:
        settings.check_beams()
    if settings.constraint is not None:
        check_grammar(*settings.constraint)
    return settings


def step_settings(visitor: Any) -> DecodingSettings:
    """The settings a step-by-step run of this visitor uses: the panel's, without beam search."""
    s = visitor.decoding or DecodingSettings()
    return replace(s, num_beams=1, length_penalty=1.0)


def status_html(message: str, error: bool = False, settings: DecodingSettings | None = None) -> str:
    """The panel's status line; it carries the applied settings as JSON (`data-decoding`) for run links."""
    line = status_line_html(message, error, "decoding-status-line")
    if settings is None or settings.is_default:
        return line
    return f'<div id="decoding-settings" data-decoding="{esc(json.dumps(settings.to_dict()))}">{line}</div>'


def link_values(link: Any) -> list:
    """The controls' values for a run link's decoding settings (`RunLink.checked.settings`, as its parse checked
    them; skipped when the link sets none or could not be read)."""
    s = getattr(getattr(link, "checked", None), "settings", None)
    if s is None or s.is_default:
        return [gr.skip()] * 12
    kind, text = {"json_schema": ("JSON schema", s.json_schema), "regex": ("regex", s.regex),
                  "choice": ("choice", "\n".join(s.choices))}.get((s.constraint or ("", ""))[0], ("none", ""))
    return [f"{s.repetition_penalty:g}", f"{s.presence_penalty:g}", f"{s.frequency_penalty:g}",
            str(s.no_repeat_ngram_size), ", ".join(f"{t}={b:g}" for t, b in s.logit_bias), "\n".join(s.bad_words),
            str(s.min_new_tokens), "\n".join(s.stop), kind, text, str(s.num_beams), f"{s.length_penalty:g}"]


def describe(s: DecodingSettings) -> str:
    """The active settings in one line."""
    beams = ("num_beams", "length_penalty")
    on = [f"{k.replace('_', ' ')} {v}" for k, v in s.to_dict().items()
          if k not in ("json_schema", "regex", "choices", *beams)]
    if s.constraint is not None:
        on.append(f"constraint: {s.constraint[0].replace('_', ' ')}")
    return ("decoding: " + ("; ".join(on) if on else "no penalties, bans or constraint")
            + f" · Beams tab: {s.num_beams} beams, length penalty {s.length_penalty:g}")


def apply(store: Any, sid: str | None, *values: Any) -> str:
    """Keep the panel's settings for this browser session and use them from its next draw on (a refusal:
    its status line says why)."""
    try:
        settings = settings_from_controls(*values)
        _, visitor = store.get_or_create(sid)
    except (InspectorError, ValueError) as exc:
        return status_html(first_line(exc), error=True)
    visitor.decoding = settings
    session = visitor.session
    if session is not None and session.records and not visitor.lock.locked():
        session.set_decoding(step_settings(visitor))
        return status_html(describe(settings) + " (from the next draw on)", settings=settings)
    return status_html(describe(settings) + " (from the next Prefill on)", settings=settings)


def build_decoding_controls() -> DecodingControls:
    """The controls, laid out where they are called (the page's settings panel)."""
    def box(value: str, label: str, elem_id: str, **kw: Any) -> Any:
        return gr.Textbox(value, label=label, elem_id=elem_id, lines=1, max_lines=1, min_width=110, **kw)

    gr.Markdown("**Decoding**: processors between the logits and the token (each a stage of the Sampling view), "
                "a grammar constraint, and beam search (the Beams tab).", elem_classes="ii-caption")
    with gr.Row():
        rep = box("1", f"repetition penalty ({gs.REPETITION_PENALTY.allowed})", "repetition-penalty")
        pres = box("0", "presence penalty (OpenAI, -2..2)", "presence-penalty")
        freq = box("0", "frequency penalty (OpenAI, -2..2)", "frequency-penalty")
        ngram = box("0", "no-repeat n-gram size (0 = off)", "no-repeat-ngram")
        min_new = box("0", "min new tokens (EOS banned before)", "min-new-tokens")
    with gr.Row():
        bias = box("", "logit bias (ID=V, comma separated)", "logit-bias")
        bad = gr.Textbox("", label="bad words (one per line)", lines=2, elem_id="bad-words", min_width=140)
        stop = gr.Textbox("", label="stop strings (one per line)", lines=2, elem_id="stop-strings", min_width=140)
    with gr.Row():
        kind = gr.Dropdown(CONSTRAINTS, value="none", label="constraint", elem_id="constraint-kind", min_width=120,
                           scale=1)
        text = gr.Textbox("", label="JSON schema / regex / choices (one per line)", lines=2,
                          elem_id="constraint-text", scale=4)
        beams = box("4", f"beams (Beams tab, {gs.NUM_BEAMS.allowed})", "num-beams")
        length_penalty = box("1", "length penalty (beams)", "length-penalty")
    status = gr.HTML(status_html("decoding: no penalties, bans or constraint"), elem_id="decoding-status")
    return DecodingControls(rep, pres, freq, ngram, bias, bad, min_new, stop, kind, text, beams, length_penalty,
                            status)


def wire_decoding_controls(controls: DecodingControls, store: Any, sid: Any) -> None:
    """Each control's change (on blur / Enter for text) applies the whole panel."""
    events = []
    for c in controls.inputs:
        events += [c.change] if isinstance(c, gr.Dropdown) else [c.blur, c.submit]
    gr.on(events, lambda s, *v: apply(store, s, *v), [sid, *controls.inputs], [controls.status],
          trigger_mode="always_last", **NO_LOADING_STATUS, api_visibility="undocumented")
