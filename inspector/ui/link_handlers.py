"""Links that reproduce a run (`inspector.ui.run_links`): written from the session, opened on page load.

`link_fill(request)`, `link_run(h, ...)` and `link_query_for(h, ...)` are wired by the page (`h`: the page's
run, `inspector.ui.handlers.Handlers`). On page load `link_fill` reads the URL's
query (its `RunRequest`, checked: `inspector.ui.run_links.parse_link`): it fills the controls (prompt, chat,
system prompt, sampling, max new tokens) and keeps the link in a `gr.State`; `link_run` then prefills the
run the link's parse checked (`RunLink.checked`, not checked again) and steps exactly as a visitor pressing
the buttons would (the same caps and session), and replays the link's branches
(`inspector.session.tree_replay`). A bad link leaves the
controls as they are and says why in the status line.

"Link to this run" asks the server (`link_query_for`): the link is made from what the session ran — the
prompt, chat and system prompt given to its prefill (`remember_run`; a trace's saved ones once opened), the
newest step's sampling settings and seed, the decoding settings, max new tokens, and every token-fork
branch's tokens with the one shown — never from the controls, which may have been edited since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from inspector.errors import InputError, InspectorError
from inspector.session.branches import BranchTree, SavedTree
from inspector.session.tree_replay import grow_tree
from inspector.ui.model_thread import call, on_model_thread
from inspector.ui.refusals import keep_sid, refuses
from inspector.ui.decoding_controls import step_settings
from inspector.ui.run_links import KEYS, RunLink, link_query, parse_link, tree_fields
from inspector.ui.visitors import Visitor

CONTROLS = KEYS[:-1]  # the controls a link fills, in order: prompt ... max_new (steps is not a control)
MAX_LINK_CHARS = 16_000  # longer queries are refused: browsers and proxies cut long addresses


@dataclass(frozen=True)
class RunOrigin:
    """What the session's prefill was given as text (the session itself keeps only token ids)."""

    prompt: str
    chat: bool
    system: str


def remember_run(visitor: Visitor, prompt: Any, chat: Any, system: Any) -> None:
    """Keep what the visitor's new run was prefilled from, for its link and its trace file."""
    visitor.origin = RunOrigin(str(prompt or ""), bool(chat), str(system or ""))


def run_origin(visitor: Visitor) -> RunOrigin | None:
    """The prompt, chat and system prompt of the visitor's run: its prefill's, or a trace's saved ones."""
    saved = getattr(visitor.session, "settings", None)  # a session opened from a trace file
    if isinstance(saved, dict):
        return RunOrigin(saved["prompt"], bool(saved["chat"]), saved["system"] or "") if saved.get("prompt") else None
    return visitor.origin


def link_for(visitor: Visitor) -> tuple[RunLink, int]:
    """The link that reproduces what the visitor's run shows, and how many branches it leaves out (`tree_of`);
    InputError when there is none to make."""
    s = visitor.session if visitor is not None else None
    if s is None or not s.records:
        raise InputError("no run to link to yet: press Prefill first")
    origin = run_origin(visitor)
    if origin is None:
        raise InputError("this run's prompt text is not known (a trace saved without it): save a trace instead")
    params = next(r.sample.params for r in reversed(s.records) if r.sample is not None)
    tree, left_out = tree_of(visitor)
    decoding = s.decoding.to_dict()
    link = RunLink(prompt=origin.prompt, chat=origin.chat, system=origin.system, temperature=params.temperature,
                   top_k=params.top_k, top_p=params.top_p, min_p=params.min_p, seed=params.seed,
                   max_new=visitor.max_new_tokens, steps=len(tree.branches[0].generated_ids) - 1,
                   decoding=json.dumps(decoding) if decoding else "", **tree_fields(tree))
    return link, left_out


def tree_of(visitor: Visitor) -> tuple[SavedTree, int]:
    """The visitor's branch tree as a `SavedTree` (a single branch when it never branched), and how many
    branches it leaves out (intervention branches: their levers do not travel)."""
    s = visitor.session
    tree = visitor.branches if visitor.branches is not None else BranchTree(s.generated_ids, s.text)
    tree.sync(s.generated_ids, s.text)
    return tree.saved()


def no_link(sid: Any) -> str:
    """A refused link: no query (the page then shows no link)."""
    return ""


@refuses(lead=no_link)
def link_query_for(h: Any, sid: Any) -> tuple[str, dict[str, Any]]:
    """The button "Link to this run": ("?query" for the page to put its own address before, "" when refused;
    the status line)."""
    visitor = h.store.get(sid)
    if visitor is None:
        raise InputError("no run to link to yet: press Prefill first")
    with visitor.exclusive("link"):  # not while Play moves the run on
        link, left_out = call(link_for, visitor)  # on the model thread, which owns the session's state
    query = link_query(link)
    if len(query) > MAX_LINK_CHARS:
        raise InputError(f"this run's link would be {len(query):,} characters, too long for an address: "
                         f"save a trace instead")
    note = f" (it leaves out {left_out} intervention branches: their changes do not fit in a link)" if left_out else ""
    return f"?{query}", {"status": h.render.status(visitor, f"link made from this run's prompt, settings and branches{note}")}


def link_fill(request: gr.Request) -> list:
    """Control values from the URL (skipped when it names no run), then the link itself (`RunLink`, with the run
    it checked), an error message (str) or None for the State that `link_run` reads."""
    try:
        link = parse_link(dict(request.query_params) if request is not None else {})
    except InspectorError as exc:
        return [gr.skip()] * len(CONTROLS) + [str(exc)]
    if link is None:
        return [gr.skip()] * len(CONTROLS) + [None]
    return [getattr(link, k) for k in CONTROLS] + [link]


@refuses(lead=keep_sid)
def link_run(h: Any, sid: Any, link: Any, layer: Any, head: Any) -> tuple[Any, dict[str, Any]]:
    """Prefill and step the linked run in this browser session, then grow its branches; (sid, the views)."""
    if link is None:
        return gr.skip(), {}
    if isinstance(link, str):
        raise InputError(link)  # the link could not be read: why, in the status line
    run, tree = link, link.tree
    sid, linked = h.store.get_or_create(sid)
    linked.decoding = link.checked.settings  # the settings panel's (beams kept for the Beams tab)
    # the link's run as parse_link checked it, with the settings a step-by-step run uses (as the Prefill's)
    checked = replace(link.checked, settings=step_settings(linked))
    sid, visitor = h.start(sid, checked)
    if tree is None:
        for _ in range(min(run.steps, visitor.max_new_tokens - 1)):
            if visitor.session.finished:
                break
            h.run_step(sid, checked.params)
        note = f"opened from a link: prefill + {len(visitor.session.records) - 1} steps"
    else:
        with visitor.exclusive("link"):
            _grow(visitor, tree)
        n = len(tree.branches)
        note = (f"opened from a link: prefill + {len(tree.branches[0].generated_ids) - 1} steps"
                + (f", {n} branches, showing #{tree.current}" if n > 1 else ""))
    views = h.views(visitor, layer, head, note)
    h.queue_forward_ahead(visitor)
    return sid, views


@on_model_thread
def _grow(visitor: Visitor, tree: SavedTree) -> None:
    visitor.branches = grow_tree(visitor.session, tree)
