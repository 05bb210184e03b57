"""Tokens & text view: every position as a chip (piece + id), and the generated text.

Chips carry `data-pos` / `data-id` so static/app.js can turn a click into "select this position".
Prompt chips are blue, generated green, special (control) tokens purple with a dashed border.
A generated chip whose step's logit lens (or only its `commitment`) is known carries its commitment layer
(`decided_layers`): a small "L21" badge and "decided at layer 21 by the logit lens" in its tooltip, the first
layer from which the lens's top-1 stays the token the model ranked first (`inspector.session.records.
lens_commitment`). That is what the lens shows, not when the model "knows" the token: the lens reads early
layers poorly (nostalgebraist 2020; Belrose et al. 2023), and the tooltip says so.
"""

from __future__ import annotations

from inspector.generation.finish import finish_label
from inspector.session.records import ForwardRecord, lens_commitment
from inspector.viz.common import esc, show_piece

CAPTION = ("Tokens & text: the prompt is split into tokens (blue, processed together in the prefill; special "
           "tokens purple); the prefill's logits give the first generated token (green) and each decode step one "
           "more. A generated token's badge (L21) is the layer from which the logit lens shows it on top: what "
           "the lens reads, not when the model \"knows\" it. Click a token to select its position.")

CHIP_START = '<span class="ii-chip '  # how every chip's HTML begins (`chip_html`): the page lists chips by it
LENS_NOTE = "the logit lens reads early layers poorly: a layer where it shows the token, not where the model knows it"


def decided_layers(records: list[ForwardRecord]) -> dict[int, tuple[int, bool]]:
    """Per generated position whose step's lens or commitment is recorded: (commitment layer, whether the token
    there is the lens's final top-1). Step k's forward ends at the position before token k, which its draw produced."""
    out = {}
    for rec in records:
        found = lens_commitment(rec)
        if rec.sample is None or found is None:
            continue
        layer, final = found
        out[rec.start_pos + rec.n_new] = (layer, final == rec.sample.token_id)
    return out


def _badge(decided: tuple[int, bool] | None) -> tuple[str, str]:
    """(tooltip text, badge html) of a generated chip's commitment layer."""
    if decided is None:
        return "", ""
    layer, top1 = decided
    if not top1:  # sampled below the top: the lens settled on another token
        return (f" · not the model's top-1 at the output: sampling (or a penalty, a constraint, a forced token) "
                f"chose it; the logit lens shows the top-1 from layer {layer} on",
                f'<span class="ii-decided ii-decided-other" data-layer="{layer}">~</span>')
    return (f" · decided at layer {layer} by the logit lens: its top-1 from there on ({LENS_NOTE})",
            f'<span class="ii-decided" data-layer="{layer}">L{layer}</span>')


def chip_html(pos: int, tid: int, piece: str, is_special: bool, n_prompt: int, selected: int | None = None,
              decided: tuple[int, bool] | None = None) -> str:
    """The chip of one position: piece and id, its role in the tooltip, outlined when `selected`, and a
    generated token's commitment badge (`decided`: its entry of `decided_layers`)."""
    classes = ["ii-prompt" if pos < n_prompt else "ii-gen"]  # after "ii-chip" (CHIP_START)
    if is_special:
        classes.append("ii-special")
    if pos == selected:
        classes.append("ii-selected")
    role = "prompt" if pos < n_prompt else f"generated #{pos - n_prompt + 1}"
    note, badge = _badge(decided) if pos >= n_prompt else ("", "")
    title = f"position {pos} · id {tid} · {role}" + (" · special token" if is_special else "") + note
    return (f'{CHIP_START}{" ".join(classes)}" data-pos="{pos}" data-id="{tid}" title="{esc(title)}">'
            f'<span class="ii-piece">{esc(show_piece(piece, 24))}</span>'
            f'<span class="ii-id">{tid}</span>{badge}</span>')


def prompt_chips_html(ids: list[int], pieces: list[str], special: list[bool], n_prompt: int,
                      selected: int | None = None) -> str:
    """The chips of the prompt's positions (the first `n_prompt`), one after another: what
    `token_chips_html` shows of them, the same on every step of a run while the selection stays out of them."""
    return "".join(chip_html(pos, ids[pos], pieces[pos], special[pos], n_prompt, selected)
                   for pos in range(min(n_prompt, len(ids), len(pieces), len(special))))


def token_chips_parts(ids: list[int], pieces: list[str], special: list[bool], n_prompt: int,
                      selected: int | None = None, decided: dict[int, tuple[int, bool]] | None = None,
                      prompt_chips: str | None = None) -> tuple[str, str, str]:
    """`token_chips_html` in three parts that join to it: (what comes before the prompt's chips, the prompt's
    chips, the generated chips and the end). `prompt_chips`: the prompt's chips already built by
    `prompt_chips_html` with the same arguments (a long prompt's are the same on every step), else built here."""
    if prompt_chips is None:
        prompt_chips = prompt_chips_html(ids, pieces, special, n_prompt, selected)
    decided = decided or {}
    generated = "".join(chip_html(pos, ids[pos], pieces[pos], special[pos], n_prompt, selected, decided.get(pos))
                        for pos in range(n_prompt, min(len(ids), len(pieces), len(special))))
    n_gen = len(ids) - n_prompt
    head = (f'<div class="ii-chip-count" id="token-count" data-prompt="{n_prompt}" data-generated="{n_gen}">'
            f'{n_prompt} prompt tokens · {n_gen} generated</div>')
    return f'<div id="token-chips" class="ii-chips">{head}', prompt_chips, f"{generated}</div>"


def token_chips_html(ids: list[int], pieces: list[str], special: list[bool], n_prompt: int,
                     selected: int | None = None, decided: dict[int, tuple[int, bool]] | None = None) -> str:
    """One chip per position; hovering shows id and position, the selected position is outlined; `decided`
    (from `decided_layers`) badges the generated tokens with their commitment layer."""
    if not ids:
        return '<div id="token-chips" class="ii-chips ii-empty">No tokens yet: type a prompt and press Prefill.</div>'
    return "".join(token_chips_parts(ids, pieces, special, n_prompt, selected, decided))


def generated_text_html(text: str, finished: str | None = None) -> str:
    """The generated text so far, whitespace preserved, with the reason it stopped when it did."""
    end = finish_label(finished, long=True)
    tail = f'<span class="ii-finished"> [stopped: {esc(end)}]</span>' if end else ""
    body = esc(text) if text else '<span class="ii-muted">(nothing generated yet)</span>'
    return f'<div id="generated-text" class="ii-text">{body}{tail}</div>'
