"""A saved branch tree grown again in a live session: what opening a link with branches does.

`grow_tree(session, saved)` takes a session just prefilled with the run's prompt and settings and makes it
hold every branch of `saved` (`inspector.session.branches.SavedTree`) in turn, as a person clicking would
have made them: the root's tokens, then for each branch its parent's tokens up to the fork step, the forced
token there, and the branch's tokens after it. Every step goes through `Session.follow`: one forward per
token on the shared KV cache, each token drawn by the session's sampler and forced only where the saved
token differs (so a replayed token is marked forced exactly where the draw disagreed). The session ends
holding the shown branch; the tree it returns has every branch's tokens and text as replayed.
"""

from __future__ import annotations

from inspector.errors import InputError
from inspector.session.branches import BranchTree, SavedTree, check_saved
from inspector.session.session import Session


def grow_tree(session: Session, saved: SavedTree) -> BranchTree:
    """The tree of `saved`, replayed in `session` (prefilled, same prompt); InputError naming the branch that
    cannot be replayed (a token outside the vocabulary, a run that finishes before the branch's end)."""
    check_saved(saved)
    if not session.records:
        raise InputError("nothing to grow branches from: run prefill first")
    root = saved.branches[0]
    _follow(session, root.generated_ids, 0)
    tree = BranchTree(session.generated_ids, session.text, levers=session.own_levers)
    for i, b in enumerate(saved.branches[1:], start=1):
        tree.sync(session.generated_ids, session.text)
        tree.current = b.parent  # a fork is made off the branch in use
        _follow(session, b.generated_ids, i)
        tree.fork(b.at_step, b.forced_id, session.tokenizer.piece(b.forced_id), session.generated_ids, session.text)
    tree.sync(session.generated_ids, session.text)
    shown = tree.get(saved.current)
    session.follow(shown.generated_ids)
    tree.current = shown.id
    return tree


def _follow(session: Session, ids: list[int], branch: int) -> None:
    try:
        session.follow(ids)
    except InputError as exc:
        raise InputError(f"branch {branch} cannot be replayed: {exc}") from None
