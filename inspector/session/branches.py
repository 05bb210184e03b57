"""A tree of branches of one generation: "what if the model had picked the other token at step k?".

Pure bookkeeping (no tensors). The root branch is the run as sampled after a prefill. Forcing token t at
step k (`Session.branch`) starts a new branch whose parent is the branch in use; it shares the parent's
tokens before step k. Each branch keeps the tokens and text that followed its branch point, updated by
`sync` as the session steps on. Switching branches is the session's job (`Session.follow(branch ids)`
replays the branch's tokens over the shared prefix); the tree only says which tokens each branch holds.

Each branch also keeps the levers its whole run uses (`levers`, opaque here: `inspector.generation.levers.
Levers`, or None for the session's own). A token fork inherits its parent's; `fork_levers` starts a branch
that is the run again under other levers (an intervention), labelled with what it changed ("head 5.3 off").
Switching to a branch whose levers differ runs its prompt again under them (`inspector.session.intervene`).

A tree travels (in a trace file, in a link) as a `SavedTree`: every token-fork branch's tokens, parent and fork
step, and which one is shown. Levers hold functions and do not travel: `BranchTree.saved()` keeps the branches
reachable from the root through token forks only (an intervention branch and what grew from it stay behind),
and `BranchTree.from_saved` gives every branch the levers of the session it is restored into.
`first_divergence(a, b)` is the first step where two branches' tokens differ (what the tree highlights).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inspector.errors import InputError

MAX_BRANCHES = 32  # per run: each holds a list of token ids, a switch replays forwards


@dataclass
class Branch:
    id: int
    parent: int | None  # None: the root (the run as sampled)
    at_step: int | None  # the step whose token was forced (None for the root)
    forced_id: int | None
    forced_piece: str
    generated_ids: list[int] = field(default_factory=list)  # the whole run's sampled tokens on this branch
    text: str = ""
    label: str = ""  # what an intervention branch changed ("" for the root and token forks)
    levers: Any = None  # the levers of this branch's whole run (None: the session's levers at the start)


class BranchTree:
    """The branches of one run, and which one the session shows (`current`)."""

    def __init__(self, generated_ids: list[int], text: str, levers: Any = None) -> None:
        self.branches: list[Branch] = [Branch(0, None, None, None, "", list(generated_ids), text, levers=levers)]
        self.current = 0

    def __len__(self) -> int:
        return len(self.branches)

    def get(self, branch_id: int) -> Branch:
        if not 0 <= branch_id < len(self.branches):
            raise InputError(f"no branch {branch_id}: this run has branches 0 to {len(self.branches) - 1}")
        return self.branches[branch_id]

    def sync(self, generated_ids: list[int], text: str) -> None:
        """Record what the branch in use holds now (call after steps)."""
        b = self.branches[self.current]
        b.generated_ids, b.text = list(generated_ids), text

    def fork(self, at_step: int, token_id: int, piece: str, generated_ids: list[int], text: str) -> Branch:
        """A new branch off the one in use, at `at_step` with `token_id` forced (the session has already
        branched: `generated_ids` and `text` are its state now). The new branch is in use afterwards."""
        return self._add(Branch(len(self.branches), self.current, at_step, token_id, piece, list(generated_ids), text,
                                levers=self.branches[self.current].levers))

    def fork_levers(self, label: str, levers: Any, generated_ids: list[int], text: str) -> Branch:
        """A new branch off the one in use: the run again from its prompt under `levers` (the session has
        already run it: `generated_ids` and `text` are its state now). In use afterwards."""
        return self._add(Branch(len(self.branches), self.current, 0, None, "", list(generated_ids), text, label, levers))

    def _add(self, b: Branch) -> Branch:
        if len(self.branches) >= MAX_BRANCHES:
            raise InputError(f"this run has {MAX_BRANCHES} branches, the most kept: press Prefill to start over")
        self.branches.append(b)
        self.current = b.id
        return b

    def saved(self) -> tuple["SavedTree", int]:
        """The token-fork part of the tree as a `SavedTree` (ids renumbered in order), and how many branches
        it leaves out (intervention branches and their descendants). The shown branch is the one in use when
        it is kept, else its nearest kept ancestor."""
        kept: dict[int, int] = {}  # old id -> new id
        out: list[SavedBranch] = []
        for b in self.branches:
            if b.parent is None or (b.forced_id is not None and not b.label and b.parent in kept):
                kept[b.id] = len(out)
                out.append(SavedBranch(None if b.parent is None else kept[b.parent], b.at_step, b.forced_id,
                                       b.forced_piece, list(b.generated_ids), b.text))
        shown = self.current
        while shown not in kept:
            shown = self.branches[shown].parent  # the root is always kept
        return SavedTree(out, kept[shown]), len(self.branches) - len(out)

    @classmethod
    def from_saved(cls, saved: "SavedTree", levers: Any = None) -> "BranchTree":
        """The tree a `SavedTree` describes (checked: `check_saved`), every branch under `levers`."""
        check_saved(saved)
        root = saved.branches[0]
        tree = cls(root.generated_ids, root.text, levers=levers)
        for b in saved.branches[1:]:
            tree.branches.append(Branch(len(tree.branches), b.parent, b.at_step, b.forced_id, b.forced_piece,
                                        list(b.generated_ids), b.text, levers=levers))
        tree.current = saved.current
        return tree

    def depth(self, branch_id: int) -> int:
        """Number of forks between the root and this branch (for indenting the tree)."""
        d, b = 0, self.get(branch_id)
        while b.parent is not None:
            d, b = d + 1, self.branches[b.parent]
        return d


@dataclass
class SavedBranch:
    """One branch of a `SavedTree` (the root has parent, at_step and forced_id None)."""

    parent: int | None
    at_step: int | None
    forced_id: int | None
    forced_piece: str
    generated_ids: list[int]
    text: str


@dataclass
class SavedTree:
    """The token-fork branches of a run, in creation order (a parent before its children), and the shown one."""

    branches: list[SavedBranch]
    current: int = 0


def check_saved(saved: SavedTree) -> None:
    """InputError naming the first branch whose place in the tree is impossible: a parent after it, a fork step
    past its parent's tokens, tokens that do not start with the parent's before the fork and the forced token
    at it; or a shown branch that does not exist."""
    bs = saved.branches
    if not bs:
        raise InputError("a branch tree holds at least the root")
    if len(bs) > MAX_BRANCHES:
        raise InputError(f"a run keeps at most {MAX_BRANCHES} branches, this tree has {len(bs)}")
    if bs[0].parent is not None or bs[0].at_step is not None or not bs[0].generated_ids:
        raise InputError("branch 0 must be the root: no parent, no fork step, at least one token")
    for i, b in enumerate(bs[1:], start=1):
        if b.parent is None or not 0 <= b.parent < i:
            raise InputError(f"branch {i}: its parent must be a branch before it (0 to {i - 1}), got {b.parent}")
        parent = bs[b.parent].generated_ids
        if b.at_step is None or not 0 <= b.at_step < len(parent):
            raise InputError(f"branch {i}: its fork step must be 0 to {len(parent) - 1}, got {b.at_step}")
        k = b.at_step
        if b.generated_ids[:k] != parent[:k] or len(b.generated_ids) <= k or b.generated_ids[k] != b.forced_id:
            raise InputError(f"branch {i}: its tokens must repeat its parent's before step {k} and hold the "
                             f"forced token at it")
    if not 0 <= saved.current < len(bs):
        raise InputError(f"the shown branch must be 0 to {len(bs) - 1}, got {saved.current}")


def first_divergence(parent: list[int], ids: list[int]) -> int | None:
    """The first step where `ids` differs from `parent` (None: the same as far as both go)."""
    return next((k for k, (a, b) in enumerate(zip(parent, ids)) if a != b), None)
