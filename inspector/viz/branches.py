"""Branch controls as HTML: the tree of branches of a run, and "force this token" buttons.

Pure functions of plain data. `static/app.js` turns a click on a `.ii-branch-force` element (its
`data-step`, `data-id`) into a branch request and a click on a `.ii-branch-node` (its `data-branch`) into
a switch; the page's handlers do the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.viz.common import esc, show_piece


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


def branch_tree_html(rows: list[BranchRow], current: int) -> str:
    """The tree, one line per branch (indented by depth): branch point, forced token, the text that followed.
    Empty (an invisible placeholder) while the run has a single branch."""
    if len(rows) <= 1:
        return '<div id="branch-tree" data-branches="1" data-current="0"></div>'
    lines = []
    for r in rows:
        what = "as sampled" if r.at_step is None else f"step {r.at_step} ← {esc(show_piece(r.forced_piece, 14))}"
        what = esc(r.label) if r.label else what
        tail = r.text[-60:]
        cls = "ii-branch-node ii-selected" if r.id == current else "ii-branch-node"
        lines.append(f'<div class="{cls}" data-branch="{r.id}" role="button" tabindex="0" '
                     f'style="margin-left:{12 * r.depth}px" title="switch to this branch">'
                     f'<b>#{r.id}</b> {what} · {r.n_generated} tokens · <span class="ii-branch-text">'
                     f'{"…" if len(r.text) > 60 else ""}{esc(tail)}</span></div>')
    return (f'<div id="branch-tree" class="ii-branch-tree" data-branches="{len(rows)}" data-current="{current}">'
            f'<div class="ii-caption">Branches: click one to switch to it (its tokens and KV cache are restored)</div>'
            f'{"".join(lines)}</div>')


def force_buttons_html(step: int, candidates: list[tuple[int, str, float]], chosen: int) -> str:
    """Buttons to force another candidate at `step`: (id, piece, probability) each, the chosen one marked."""
    buttons = []
    for tid, piece, prob in candidates:
        mark = " ii-chosen" if tid == chosen else ""
        buttons.append(f'<button class="ii-branch-force{mark}" data-step="{step}" data-id="{tid}" '
                       f'title="force this token at step {step} and continue from it">'
                       f'{esc(show_piece(piece, 14))} <small>{prob:.0%}</small></button>')
    return (f'<div id="branch-candidates" class="ii-branch-buttons" data-step="{step}">'
            f'<span class="ii-caption">What if it had picked… (click to branch):</span>{"".join(buttons)}</div>')
