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

    def depth(self, branch_id: int) -> int:
        """Number of forks between the root and this branch (for indenting the tree)."""
        d, b = 0, self.get(branch_id)
        while b.parent is not None:
            d, b = d + 1, self.branches[b.parent]
        return d
