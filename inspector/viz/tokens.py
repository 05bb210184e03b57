"""Tokens & text view: every position as a chip (piece + id), and the generated text.

Chips carry `data-pos` / `data-id` so static/app.js can turn a click into "select this position".
Prompt chips are blue, generated green, special (control) tokens purple with a dashed border.
"""

from __future__ import annotations

from inspector.viz.common import esc, show_piece

CAPTION = ("Tokens & text: the prompt is split into tokens (blue, processed together in the prefill); "
           "each decode step appends one generated token (green). Click a token to select its position.")


def token_chips_html(ids: list[int], pieces: list[str], special: list[bool], n_prompt: int,
                     selected: int | None = None) -> str:
    """One chip per position; hovering shows id and position, the selected position is outlined."""
    if not ids:
        return '<div id="token-chips" class="ii-chips ii-empty">No tokens yet: type a prompt and press Prefill.</div>'
    chips = []
    for pos, (tid, piece, is_special) in enumerate(zip(ids, pieces, special)):
        classes = ["ii-chip", "ii-prompt" if pos < n_prompt else "ii-gen"]
        if is_special:
            classes.append("ii-special")
        if pos == selected:
            classes.append("ii-selected")
        role = "prompt" if pos < n_prompt else f"generated #{pos - n_prompt + 1}"
        title = f"position {pos} · id {tid} · {role}" + (" · special token" if is_special else "")
        chips.append(
            f'<span class="{" ".join(classes)}" data-pos="{pos}" data-id="{tid}" title="{esc(title)}">'
            f'<span class="ii-piece">{esc(show_piece(piece, 24))}</span>'
            f'<span class="ii-id">{tid}</span></span>'
        )
    n_gen = len(ids) - n_prompt
    head = (f'<div class="ii-chip-count" id="token-count" data-prompt="{n_prompt}" data-generated="{n_gen}">'
            f'{n_prompt} prompt tokens · {n_gen} generated</div>')
    return f'<div id="token-chips" class="ii-chips">{head}{"".join(chips)}</div>'


def generated_text_html(text: str, finished: str | None = None) -> str:
    """The generated text so far, whitespace preserved, with the reason it stopped when it did."""
    end = {"eos": "end of sequence (EOS)", "max_tokens": "max new tokens reached",
           "context_full": "context window full"}.get(finished or "", "")
    tail = f'<span class="ii-finished"> [stopped: {esc(end)}]</span>' if end else ""
    body = esc(text) if text else '<span class="ii-muted">(nothing generated yet)</span>'
    return f'<div id="generated-text" class="ii-text">{body}{tail}</div>'
