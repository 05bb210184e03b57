"""Branch controls as HTML: the tree of branches of a run, the step a person chose to branch from, and
"force this token" buttons.

Pure functions of plain data. `static/app.js` turns a click on a `.ii-branch-force` element (its
`data-step`, `data-id`) into a branch request and a click on a `.ii-branch-node` (its `data-branch`) into
a switch; the page's handlers do the rest. A click on a generated token chip selects its position, and
`branch_point_html` then offers that step's candidates: branching works from any step, not only the newest.
Each tree row shows the branch's text around its first diverging token (relative to its parent), marked
`.ii-diverge`; the shown branch is `.ii-selected` with `aria-current`.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.viz.common import esc, show_piece

BEFORE_CHARS, AFTER_CHARS = 24, 48  # text kept either side of the diverging token (the rest is "…")


@dataclass(frozen=True)
class BranchRow:
    """One branch as the tree shows it."""

    id: int
    depth: int  # forks between the root and this branch
    at_step: int | None  # None: the root
    forced_piece: str
    n_generated: int
    text: str
    label: str = ""  # what an intervention branch changed ("head 5.3 off")
    # the text split around the first token that differs from the parent's (None: the root, or no difference)
    diverge_step: int | None = None
    parts: tuple[str, str, str] = ("", "", "")  # before, the diverging token, after


def _text_html(r: BranchRow) -> str:
    if r.diverge_step is None:
        tail = r.text[-(BEFORE_CHARS + AFTER_CHARS):]
        return f'{"…" if len(r.text) > len(tail) else ""}{esc(tail)}'
    before, token, after = r.parts
    short_before, short_after = before[-BEFORE_CHARS:], after[:AFTER_CHARS]
    return (f'{"…" if len(before) > BEFORE_CHARS else ""}{esc(short_before)}'
            f'<mark class="ii-diverge" data-step="{r.diverge_step}" title="first token that differs from its '
            f'parent (step {r.diverge_step})">{esc(token) or "∅"}</mark>'
            f'{esc(short_after)}{"…" if len(after) > AFTER_CHARS else ""}')


def branch_tree_html(rows: list[BranchRow], current: int) -> str:
    """The tree, one entry per branch (indented by depth): branch point, forced token, and its text with the
    first diverging token marked. Empty (an invisible placeholder) while the run has a single branch."""
    if len(rows) <= 1:
        return '<div id="branch-tree" data-branches="1" data-current="0"></div>'
    lines = []
    for r in rows:
        what = "as sampled" if r.at_step is None else f"step {r.at_step} ← {esc(show_piece(r.forced_piece, 14))}"
        what = esc(r.label) if r.label else what
        shown = r.id == current
        cls = "ii-branch-node ii-selected" if shown else "ii-branch-node"
        badge = ' <span class="ii-branch-shown">◀ shown</span>' if shown else ""
        current_attr = ' aria-current="true"' if shown else ""
        lines.append(f'<div class="{cls}" data-branch="{r.id}" role="button" tabindex="0"{current_attr} style="margin-left:{12 * r.depth}px" '
                     f'title="switch to this branch"><div class="ii-branch-head"><b>#{r.id}</b> {what} · '
                     f'{r.n_generated} tokens{badge}</div><div class="ii-branch-text">{_text_html(r)}</div></div>')
    return (f'<div id="branch-tree" class="ii-branch-tree" data-branches="{len(rows)}" data-current="{current}">'
            f'<div class="ii-caption">Branches (the first token that differs from its parent is marked): click '
            f'one to switch to it (its tokens and KV cache are restored)</div>{"".join(lines)}</div>')


def force_buttons_html(step: int, candidates: list[tuple[int, str, float]], chosen: int,
                       elem_id: str = "branch-candidates") -> str:
    """Buttons to force another candidate at `step`: (id, piece, probability) each, the chosen one marked."""
    buttons = []
    for tid, piece, prob in candidates:
        mark = " ii-chosen" if tid == chosen else ""
        buttons.append(f'<button class="ii-branch-force{mark}" data-step="{step}" data-id="{tid}" '
                       f'title="force this token at step {step} and continue from it">'
                       f'{esc(show_piece(piece, 14))} <small>{prob:.0%}</small></button>')
    return (f'<div id="{elem_id}" class="ii-branch-buttons" data-step="{step}">'
            f'<span class="ii-caption">What if it had picked… (click to branch):</span>{"".join(buttons)}</div>')


def branch_point_html(step: int | None, position: int | None = None, piece: str = "",
                      candidates: list[tuple[int, str, float]] | None = None, chosen: int | None = None) -> str:
    """The step chosen for branching (a generated token clicked: `step` and its `position`, the `piece` it
    drew and its candidates), or a one-line hint when none is (`step` None)."""
    if step is None:
        return ('<div id="branch-point" class="ii-caption" data-step="">Click a generated (green) token to see '
                'what else its step could have picked, and branch from there.</div>')
    buttons = force_buttons_html(step, candidates or [], -1 if chosen is None else chosen, "branch-point-candidates")
    return (f'<div id="branch-point" class="ii-branch-point" data-step="{step}" data-position="{position}">'
            f'<div class="ii-caption">Step {step} (position {position}) drew '
            f'<b>{esc(show_piece(piece, 20))}</b>. Forcing another token keeps the run up to this step (its tokens '
            f'and KV cache), takes that token here and continues from it as a new branch.</div>{buttons}</div>')
