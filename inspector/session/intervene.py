"""A running session under other levers: the run again from its prompt (an intervention branch), and the
replay of a branch whose levers differ from the session's.

An intervention applies to the whole run, prompt included (as `inspector run --ablate-head` and a
`--no-cache` run under it), so its branch is comparable with "as is" from the first token on, and a
cached branch equals its own full recompute. `rerun(session, levers)` runs the prompt again under
`levers` and steps as far as the run had gone (fewer when it finishes sooner), with the newest step's
sampling settings. `replay(session, levers, generated_ids)` makes the session hold a branch: when the
levers are the session's, `Session.follow` replays only the steps the branches do not share; otherwise the
prompt runs again under the branch's levers and every token of the branch is forced in turn.
"""

from __future__ import annotations

from inspector.errors import InputError
from inspector.generation.levers import Levers
from inspector.session.session import Session


def _params(session: Session):
    if not session.records or session.records[-1].sample is None:
        raise InputError("nothing to run again: run prefill first")
    return session.records[-1].sample.params


def rerun(session: Session, levers: Levers, n_tokens: int | None = None) -> None:
    """The session's prompt again under `levers`, for as many tokens as it holds now (or `n_tokens`)."""
    params = _params(session)
    n = len(session.generated_ids) if n_tokens is None else n_tokens
    session.set_levers(levers)
    session.prefill_ids(list(session.prompt_ids), params, max_new_tokens=session.max_new_tokens)
    while len(session.generated_ids) < n and not session.finished:
        session.step(params)


def replay(session: Session, levers: Levers, generated_ids: list[int]) -> None:
    """Make the session hold the branch `generated_ids` generated under `levers` (see the module docstring)."""
    if levers != session.levers:
        params = _params(session)
        session.set_levers(levers)
        session.prefill_ids(list(session.prompt_ids), params, max_new_tokens=session.max_new_tokens)
    session.follow(generated_ids)
