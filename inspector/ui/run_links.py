"""Links that reproduce a run: the page's settings as URL query parameters, and back.

`?prompt=Why+is+the+sky+blue%3F&chat=1&temperature=0.7&top_k=40&top_p=0.9&min_p=0&seed=3&max_new=32&steps=8`
opened on the page fills the controls, runs the prefill and then `steps` decode steps: the same tokens as
the run the link was made from (sampling is seeded per position, `inspector.engine.sampling.generator_for`).
Every key is optional but `prompt`; unknown keys are ignored (a link can carry tracking parameters).
`decoding` carries the settings panel's penalties, bans, stop strings, constraint and beams as the JSON of
`DecodingSettings.to_dict()` (only what differs from the defaults); the run applies them before its prefill.

Branches (`inspector.session.branches`): `tokens=12.345.67` is the run's own tokens (the root branch; `steps`
is then their count less one), `branches=0-3-812.44_1-5-7` one entry per further branch, in the order they
were made: its parent's number, the step whose token was forced, then its tokens from that step on (the
forced one first), and `branch=2` the branch shown. Opening the link replays each branch's tokens
(`inspector.session.tree_replay`), so the tree and the shown branch are the ones the link was made from.
Only unreserved URL characters are used (digits, `.`, `-`, `_`): the link stays readable.

`link_query(...)` writes such a query; `parse_link(query)` reads one into a `RunLink` with the page's
defaults filled in, or raises InputError naming the bad parameter. Numbers go through the page's own
fields (`inspector.ui.fields`): a link takes what the page's controls take. The page's "Link to this run" is
written by the server from the run the session holds (`inspector.ui.link_handlers.link_for`), not from the
controls, which may have been edited since.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from urllib.parse import urlencode

from inspector.errors import InputError
from inspector.session.settings import DecodingSettings
from inspector.session.branches import MAX_BRANCHES, SavedBranch, SavedTree, check_saved
from inspector.ui.fields import MAX_NEW, SAMPLING_UI, STEPS
from inspector.validate import Bound, whole

KEYS = ("prompt", "chat", "system", "temperature", "top_k", "top_p", "min_p", "seed", "max_new", "steps")
TRUE, FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
NUMBERS: dict[str, Bound] = {  # the link's number keys and the page's fields they fill
    **dict(zip(("temperature", "top_k", "top_p", "min_p", "seed"), SAMPLING_UI)),
    "max_new": MAX_NEW, "steps": STEPS,
}


@dataclass(frozen=True)
class RunLink:
    prompt: str
    chat: bool = True
    system: str = ""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    max_new: int = 32
    steps: int = 0  # decode steps after the prefill
    decoding: str = ""  # `DecodingSettings.to_dict()` as JSON; "" = the defaults
    tokens: str = ""  # the root branch's tokens, "id.id.id" ("" = sampled: prefill + `steps` steps)
    branches: str = ""  # further branches, "parent-step-id.id_..." (see the module docstring)
    branch: int = 0  # the branch shown


def parse_link(query: Mapping[str, str]) -> RunLink | None:
    """The run a page URL asks for; None when it names no prompt (a plain visit). InputError("link parameter
    ...: ...") on a bad value."""
    if not (query.get("prompt") or "").strip():
        return None

    def number(key: str, bound: Bound) -> int | float | None:
        raw = query.get(key)
        if raw is None:
            return None  # the RunLink default
        try:
            return bound.parse(raw)
        except InputError as exc:
            raise InputError(f"link parameter {key}: {exc}") from None

    chat_raw = (query.get("chat") or "1").strip().lower()
    if chat_raw not in TRUE | FALSE:
        raise InputError(f"link parameter chat must be 1 or 0, got {chat_raw[:20]!r}")
    values = {key: number(key, bound) for key, bound in NUMBERS.items()}
    decoding = query.get("decoding") or ""
    link = RunLink(prompt=query["prompt"], chat=chat_raw in TRUE, system=query.get("system") or "",
                   decoding=json.dumps(link_decoding(decoding).to_dict()) if decoding.strip() else "",
                   tokens=(query.get("tokens") or "").strip(), branches=(query.get("branches") or "").strip(),
                   branch=number("branch", BRANCH) or 0,
                   **{key: value for key, value in values.items() if value is not None})
    link_tree(link)  # every branch parameter checked now, before anything runs
    if link.tokens and query.get("steps") is not None and link.steps != len(ids(link.tokens, "tokens")) - 1:
        raise InputError(f"link parameter steps must be the count of tokens less one "
                         f"({len(ids(link.tokens, 'tokens')) - 1}), got {link.steps}")
    return link


BRANCH = Bound("branch", True, 0, MAX_BRANCHES - 1)
MAX_LINK_TOKENS = 100_000  # token ids one link may carry in all (the run's caps apply when it is replayed)


def ids(text: str, key: str) -> list[int]:
    """"12.345.67" -> [12, 345, 67]; InputError("link parameter KEY ...") on anything else."""
    parts = text.split(".")
    if len(parts) > MAX_LINK_TOKENS:
        raise InputError(f"link parameter {key} holds more than {MAX_LINK_TOKENS} tokens")
    try:
        return [whole(p, "token id", 0) for p in parts]
    except InputError as exc:
        raise InputError(f"link parameter {key} is token ids joined by '.': {exc}") from None


def link_tree(link: RunLink) -> SavedTree | None:
    """The branch tree a link names (None: it names no tokens, the run is sampled); InputError
    ("link parameter ...") when the tokens, branches or shown branch cannot be a tree."""
    if not link.tokens:
        if link.branches or link.branch:
            raise InputError("link parameters branches and branch need tokens (the run's own tokens)")
        return None
    tree = SavedTree([SavedBranch(None, None, None, "", ids(link.tokens, "tokens"), "")], link.branch)
    entries = link.branches.split("_") if link.branches else []
    if len(entries) >= MAX_BRANCHES:
        raise InputError(f"link parameter branches holds {len(entries)} branches; a run keeps at most "
                         f"{MAX_BRANCHES - 1} besides its own")
    for i, entry in enumerate(entries, start=1):
        fields = entry.split("-")
        if len(fields) != 3:
            raise InputError(f"link parameter branches: branch {i} is 'parent-step-ids', got {entry[:40]!r}")
        try:
            parent, step = whole(fields[0], "parent", 0, i - 1), whole(fields[1], "step", 0)
        except InputError as exc:
            raise InputError(f"link parameter branches: branch {i}: {exc}") from None
        tail = ids(fields[2], "branches")
        full = tree.branches[parent].generated_ids[:step] + tail
        tree.branches.append(SavedBranch(parent, step, tail[0], "", full, ""))
    try:
        check_saved(tree)
    except InputError as exc:
        raise InputError(f"link parameter branches: {exc}") from None
    return tree


def tree_fields(tree: SavedTree) -> dict[str, str | int]:
    """The `RunLink` fields `tokens`, `branches` and `branch` of a tree (what `link_tree` reads back)."""
    dotted = lambda xs: ".".join(str(int(x)) for x in xs)  # noqa: E731
    rest = [f"{b.parent}-{b.at_step}-{dotted(b.generated_ids[b.at_step:])}" for b in tree.branches[1:]]
    return {"tokens": dotted(tree.branches[0].generated_ids), "branches": "_".join(rest), "branch": tree.current}


def link_decoding(text: str) -> DecodingSettings:
    """The `decoding` parameter as settings; InputError("link parameter decoding ...") when it is not."""
    if not (text or "").strip():
        return DecodingSettings()
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise InputError("must be a JSON object of decoding settings")
        return DecodingSettings.from_dict(data)
    except json.JSONDecodeError as exc:
        raise InputError(f"link parameter decoding is not JSON ({exc.msg})") from None
    except (InputError, TypeError, ValueError) as exc:
        raise InputError(f"link parameter decoding: {exc}") from None


def link_query(link: RunLink) -> str:
    """The query string (without '?') that `parse_link` reads back as `link`."""
    values = asdict(link)
    values["chat"] = int(link.chat)
    if not link.system:
        del values["system"]
    if not link.decoding:
        del values["decoding"]
    for key in ("tokens", "branches"):
        if not values[key]:
            del values[key]
    if not link.tokens:
        del values["branch"]
    return urlencode(values)
