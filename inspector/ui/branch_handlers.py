"""Branching from the page: force another token at a step, keep every branch, switch between them.

`BranchHandlers` is mixed into `inspector.ui.handlers.Handlers`. A click on a "what if" candidate (Sampling
view) or a logit-lens cell (Residual view) sends "step:token id" to `branch`; a click on a node of the branch
tree sends its id to `switch`. The tree (`inspector.session.branches.BranchTree`) lives in the browser
session's entry and starts afresh with each prefill. Forcing a token only re-samples (no model run);
switching replays the target branch's tokens over the shared prefix on the decode thread
(`Session.follow`), so its records and KV cache are as if it had been generated step by step.
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError, InspectorError
from inspector.generation.levers import Levers
from inspector.session.branches import BranchTree
from inspector.session.intervene import replay
from inspector.ui.model_thread import on_model_thread
from inspector.ui.sessions import Entry
from inspector.viz.branches import BranchRow, branch_tree_html


def parse_branch_request(value: Any) -> tuple[int, int]:
    """"step:token id" (what the page sends) -> (step, token id); InputError on anything else."""
    try:
        step, token = (int(part) for part in str(value).strip().split(":"))
    except ValueError:
        raise InputError(f"a branch request is 'step:token id', got {str(value)[:40]!r}") from None
    return step, token


def tree_html(entry: Entry | None) -> str:
    """The branch tree of this session's run (a hidden placeholder while it has one branch)."""
    tree = entry.branches if entry is not None else None
    s = entry.session if entry is not None else None
    if tree is None or s is None or not s.records:
        return branch_tree_html([], 0)
    tree.sync(s.generated_ids, s.text)
    rows = [BranchRow(b.id, tree.depth(b.id), b.at_step, b.forced_piece, len(b.generated_ids), b.text, b.label)
            for b in tree.branches]
    return branch_tree_html(rows, tree.current)


class BranchHandlers:
    """The branch and switch events (needs the Handlers' store, views and run-ahead queue)."""

    def branch(self, sid, request, layer, head) -> list:
        """Force the requested token at the requested step; the run continues from it (Step / Play)."""
        entry = self.store.get(sid)
        try:
            step, token = parse_branch_request(request)
            entry = self._need_session(sid)
            with entry.exclusive("branch"):
                self._fork(entry, step, token)
            views = self.views(entry, layer, head, f"branched: step {step} now takes token {token}")
            self.queue_forward_ahead(entry)
            return views
        except (InspectorError, ValueError) as exc:
            return self.error_views(entry, exc)

    @on_model_thread
    def _fork(self, entry: Entry, step: int, token: int) -> None:
        s = entry.session
        if not 0 <= step < len(s.records):
            raise InputError(f"no step {step} in this run (0 to {len(s.records) - 1})")
        if entry.branches is None:
            entry.branches = BranchTree(s.generated_ids, s.text, levers=s.levers)
        entry.branches.sync(s.generated_ids, s.text)
        if s.generated_ids[step] == token:
            raise InputError(f"step {step} already took token {token}: pick another candidate")
        s.branch(step, token)
        entry.preview = None
        entry.uncached_ms = None
        entry.branches.fork(step, token, self.loaded.tokenizer.piece(token), s.generated_ids, s.text)

    def switch(self, sid, branch_id, layer, head) -> list:
        """Restore another branch's tokens and KV cache (replaying the forwards it does not share)."""
        entry = self.store.get(sid)
        try:
            target = int(str(branch_id).strip())
            entry = self._need_session(sid)
            with entry.exclusive("switch"):
                self._follow(entry, target)
            views = self.views(entry, layer, head, f"switched to branch #{target}")
            self.queue_forward_ahead(entry)
            return views
        except (InspectorError, ValueError) as exc:
            return self.error_views(entry, exc)

    @on_model_thread
    def _follow(self, entry: Entry, target: int) -> None:
        tree, s = entry.branches, entry.session
        if tree is None:
            raise InputError("this run has one branch: click a candidate in the Sampling view to make another")
        branch = tree.get(target)
        tree.sync(s.generated_ids, s.text)
        entry.preview = None
        entry.uncached_ms = None
        replay(s, branch.levers or Levers(), branch.generated_ids)  # an intervention branch brings its levers
        tree.current = target
