"""Branching from the page: force another token at a step, keep every branch, switch between them.

`branch(h, ...)` and `switch(h, ...)` are run events of the page's run `h` (`inspector.ui.handlers.Handlers`),
wired by the page. A click on a "what if" candidate (Sampling view, or the branch point under the
text: the step of the generated token chip a person selected, any step of the run) or a logit-lens cell
(Residual view) sends "step:token id" to `branch`; a click on a node of the branch tree sends its id to
`switch`. `tree_html(visitor)` draws both: the branch point of the selected token and the tree, each branch's
text with its first diverging token marked. The tree (`inspector.session.branches.BranchTree`) lives in the browser
session's visitor and starts afresh with each prefill. Forcing a token only re-samples (no model run);
switching replays the target branch's tokens over the shared prefix on the decode thread
(`Session.follow`), so its records and KV cache are as if it had been generated step by step.
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError
from inspector.session.branches import BranchTree, first_divergence
from inspector.session.intervene import replay
from inspector.ui.model_thread import on_model_thread
from inspector.ui.refusals import refuses
from inspector.ui.visitors import Visitor
from inspector.validate import whole
from inspector.viz.branches import BranchRow, branch_point_html, branch_tree_html

BRANCH_CHOICES = 10  # candidates offered at the chosen branch point


def parse_branch_request(value: Any) -> tuple[int, int]:
    """"step:token id" (what the page sends) -> (step, token id); InputError on anything else."""
    parts = str(value).strip().split(":")
    if len(parts) != 2:
        raise InputError(f"a branch request is 'step:token id', got {str(value)[:40]!r}")
    try:
        return whole(parts[0], "branch step", 0), whole(parts[1], "token id", 0)
    except InputError as exc:
        raise InputError(f"a branch request is 'step:token id': {exc}") from None


def tree_html(visitor: Visitor | None) -> str:
    """The branch point of the selected generated token (a hint when none is) and the tree of this session's
    run (a hidden placeholder while it has one branch)."""
    tree = visitor.branches if visitor is not None else None
    s = visitor.session if visitor is not None else None
    if s is None or not s.records:
        return branch_tree_html([], 0)
    point = _branch_point(visitor)
    if tree is None:
        return point + branch_tree_html([], 0)
    tree.sync(s.generated_ids, s.text)
    rows = []
    for b in tree.branches:
        d = None if b.parent is None else first_divergence(tree.branches[b.parent].generated_ids, b.generated_ids)
        parts = _split(s.tokenizer, b.generated_ids, d) if d is not None else ("", "", "")
        rows.append(BranchRow(b.id, tree.depth(b.id), b.at_step, b.forced_piece, len(b.generated_ids), b.text,
                              b.label, d, parts))
    return point + branch_tree_html(rows, tree.current)


def _branch_point(visitor: Visitor) -> str:
    """The candidates of the step that drew the selected generated token (the chip a person clicked)."""
    s = visitor.session
    n_prompt = len(s.prompt_ids)
    step = None if visitor.selected is None else visitor.selected - n_prompt
    if step is None or not 0 <= step < len(s.records) or s.records[step].sample is None:
        return branch_point_html(None)
    sample = s.records[step].sample
    top = [(c.id, c.piece, c.prob_raw) for c in sample.candidates[:BRANCH_CHOICES]]
    return branch_point_html(step, visitor.selected, sample.token_piece, top, sample.token_id)


def _split(tok: Any, ids: list[int], d: int) -> tuple[str, str, str]:
    """The text of `ids` before token `d`, token `d`'s own text, and the text after it. From the tokenizer's
    bytes when it has them (a read-only trace has only display pieces)."""
    if hasattr(tok, "decode_bytes"):
        text = lambda xs: tok.decode_bytes(xs).decode("utf-8", "replace")  # noqa: E731
    else:
        text = lambda xs: "".join(tok.pieces(xs))  # noqa: E731
    return text(ids[:d]), text(ids[d:d + 1]), text(ids[d + 1:])


@refuses
def branch(h: Any, sid: Any, request: Any, layer: Any, head: Any) -> dict[str, Any]:
    """Force the requested token at the requested step; the run continues from it (Step / Play)."""
    step, token = parse_branch_request(request)
    visitor = h.need_session(sid)
    with visitor.exclusive("branch"):
        _fork(h, visitor, step, token)
    views = h.views(visitor, layer, head, f"branched: step {step} now takes token {token}")
    h.queue_forward_ahead(visitor)
    return views


@on_model_thread
def _fork(h: Any, visitor: Visitor, step: int, token: int) -> None:
    s = visitor.session
    if not 0 <= step < len(s.records):
        raise InputError(f"no step {step} in this run (0 to {len(s.records) - 1})")
    if visitor.branches is None:
        visitor.branches = BranchTree(s.generated_ids, s.text, levers=s.own_levers)
    visitor.branches.sync(s.generated_ids, s.text)
    if s.generated_ids[step] == token:
        raise InputError(f"step {step} already took token {token}: pick another candidate")
    s.branch(step, token)
    visitor.preview = None
    visitor.uncached_ms = None
    visitor.branches.fork(step, token, h.loaded.tokenizer.piece(token), s.generated_ids, s.text)


@refuses
def switch(h: Any, sid: Any, branch_id: Any, layer: Any, head: Any) -> dict[str, Any]:
    """Restore another branch's tokens and KV cache (replaying the forwards it does not share)."""
    target = whole(branch_id, "branch", 0)
    visitor = h.need_session(sid)
    with visitor.exclusive("switch"):
        _follow(visitor, target)
    views = h.views(visitor, layer, head, f"switched to branch #{target}")
    h.queue_forward_ahead(visitor)
    return views


@on_model_thread
def _follow(visitor: Visitor, target: int) -> None:
    tree, s = visitor.branches, visitor.session
    if tree is None:
        raise InputError("this run has one branch: click a generated token, then another candidate, to make "
                         "another")
    chosen = tree.get(target)
    tree.sync(s.generated_ids, s.text)
    visitor.preview = None
    visitor.uncached_ms = None
    replay(s, chosen.levers, chosen.generated_ids)  # an intervention branch brings its levers
    tree.current = target
