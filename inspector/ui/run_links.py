"""Links that reproduce a run: the page's settings as URL query parameters, and back.

`?prompt=Why+is+the+sky+blue%3F&chat=1&temperature=0.7&top_k=40&top_p=0.9&min_p=0&seed=3&max_new_tokens=32&steps=8`
opened on the page fills the controls, runs the prefill and then `steps` decode steps: the same tokens as
the run the link was made from (sampling is seeded per position, `inspector.engine.sampling.generator_for`).
The run's keys are the page's run as a `RunRequest` (`inspector.generation.request`) in its JSON form, one
query key per field, under the same names: prompt, chat (1 or 0), system, the sampling fields, max_new_tokens,
and the settings panel's decoding fields that differ from the defaults (repetition_penalty, stop, regex, ...;
a list field as a JSON list, `stop=["END"]`; num_beams and length_penalty are the Beams tab's). They are read
back as that request and checked once, as the page's Prefill checks its controls (`fields.PAGE_NAMES`: the
controls' ranges); the run applies the decoding fields before its prefill. Every key is optional but
`prompt` (absent: the page's defaults, chat on and 32 new tokens); a `RunRequest` field the page's run does
not take (quant, ablate_head, ...) is refused, other unknown keys are ignored (tracking parameters). Older
links still open: `max_new` for max_new_tokens, and `decoding`, the settings as `DecodingSettings.to_dict()`'s
JSON.

Branches (`inspector.session.branches`): `tokens=12.345.67` is the run's own tokens (the root branch; `steps`
is then their count less one), `branches=0-3-812.44_1-5-7` one entry per further branch, in the order they
were made: its parent's number, the step whose token was forced, then its tokens from that step on (the
forced one first), and `branch=2` the branch shown. Opening the link replays each branch's tokens
(`inspector.session.tree_replay`), so the tree and the shown branch are the ones the link was made from.
Only unreserved URL characters are used (digits, `.`, `-`, `_`): the link stays readable.

`link_query(...)` writes such a query; `parse_link(query)` reads one into a `RunLink` with the page's
defaults filled in, or raises InputError naming each bad parameter ("link parameter top_k: top-k must be
..."); `link_request(link)` is its `RunRequest`. The link it reads keeps the run it checked (`RunLink.checked`:
the request, its sampling parameters and the settings panel's decoding) and the branch tree
(`RunLink.tree`), so the page runs them as they are, with no second parse or check. A link takes what the page's controls take. The page's
"Link to this run" is written by the server from the run the session holds (`inspector.ui.link_handlers.
link_for`), not from the controls, which may have been edited since.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any
from urllib.parse import urlencode

from inspector.errors import InputError
from inspector.quant.requested import VERSION, Checked, RequestError, RunRequest, decoding_fields
from inspector.session.branches import MAX_BRANCHES, SavedBranch, SavedTree, check_saved
from inspector.session.settings import LENGTH_PENALTY, NUM_BEAMS, DecodingSettings
from inspector.ui.fields import PAGE_NAMES, STEPS
from inspector.validate import Bound, whole

KEYS = ("prompt", "chat", "system", "temperature", "top_k", "top_p", "min_p", "seed", "max_new", "steps")  # RunLink's
TRUE, FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
DECODING = tuple(decoding_fields(DecodingSettings()))  # the settings panel's fields of a RunRequest
RUN_KEYS = ("prompt", "chat", "system", "temperature", "top_k", "top_p", "min_p", "seed", "max_new_tokens", *DECODING)
NOT_TAKEN = tuple(f.name for f in dataclass_fields(RunRequest) if f.name not in RUN_KEYS)  # not the page's run's
LISTS = ("logit_bias", "bad_words", "stop", "choice")
OLD_KEYS = {"max_new": "max_new_tokens"}  # older links' names
PAGE_DEFAULTS = {"chat": True, "max_new_tokens": 32}  # the page's controls' defaults where a RunRequest's differ


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
    # what `parse_link` checked, for the page to run as it is (None in a link written from a run, `link_for`);
    # neither is part of the link's value (its query keys are the fields above)
    checked: Checked | None = field(default=None, compare=False, repr=False)  # the run, decoding with beams
    tree: SavedTree | None = field(default=None, compare=False, repr=False)  # its branches (None: none)


def parse_link(query: Mapping[str, str]) -> RunLink | None:
    """The run a page URL asks for; None when it names no prompt (a plain visit). InputError("link parameter
    ...: ...", one line per bad parameter) on a bad value."""
    if not (query.get("prompt") or "").strip():
        return None
    taken = [key for key in query if key in NOT_TAKEN]
    if taken:
        raise InputError(f"link parameter {taken[0]}: the page's run does not take it (it runs the loaded model "
                         f"with sampling and the settings panel's decoding; `inspector run` takes {taken[0]})")
    chat_raw = (query.get("chat") or "1").strip().lower()
    if chat_raw not in TRUE | FALSE:
        raise InputError(f"link parameter chat must be 1 or 0, got {chat_raw[:20]!r}")
    doc: dict[str, Any] = {**PAGE_DEFAULTS, "chat": chat_raw in TRUE}
    if (query.get("decoding") or "").strip():  # an older link's settings, as one JSON object
        doc.update(decoding_fields(link_decoding(query["decoding"])))
    keys = {}  # field -> the query key that gave it
    for key, raw in query.items():
        name = OLD_KEYS.get(key, key)
        if name in RUN_KEYS and name != "chat":
            doc[name], keys[name] = (_list(key, raw) if name in LISTS else raw), key
    doc["system"] = doc.get("system") or None
    request = RunRequest.from_json({"version": VERSION, **doc})
    beams = {f: bounded(keys.get(f, f), b, getattr(request, f)) for f, b in (("num_beams", NUM_BEAMS),
                                                                            ("length_penalty", LENGTH_PENALTY))}
    try:  # checked as the page's Prefill checks its controls (beam search is the Beams tab's, not this run's)
        checked = replace(request, num_beams=1, length_penalty=1.0).checked(PAGE_NAMES)
    except RequestError as exc:
        raise InputError("\n".join(f"link parameter {keys.get(f, f)}: {line}" if f else f"link parameters: {line}"
                                   for f, line in zip(exc.fields, exc.lines))) from None
    r, p, settings = checked.request, checked.params, replace(checked.settings, **beams)
    link = RunLink(prompt=r.prompt, chat=r.chat, system=r.system or "", temperature=p.temperature, top_k=p.top_k,
                   top_p=p.top_p, min_p=p.min_p, seed=p.seed, max_new=r.max_new_tokens,
                   steps=bounded("steps", STEPS, query.get("steps", 0)),
                   decoding="" if settings.is_default else json.dumps(settings.to_dict()),
                   tokens=(query.get("tokens") or "").strip(), branches=(query.get("branches") or "").strip(),
                   branch=bounded("branch", BRANCH, query.get("branch", 0)))
    tree = link_tree(link)  # every branch parameter checked now, before anything runs
    if link.tokens and query.get("steps") is not None and link.steps != len(ids(link.tokens, "tokens")) - 1:
        raise InputError(f"link parameter steps must be the count of tokens less one "
                         f"({len(ids(link.tokens, 'tokens')) - 1}), got {link.steps}")
    return replace(link, checked=replace(checked, settings=settings), tree=tree)


def bounded(key: str, bound: Bound, raw: Any) -> Any:
    """A link parameter parsed by its field's Bound (InputError "link parameter KEY: ...")."""
    try:
        return bound.parse(raw)
    except InputError as exc:
        raise InputError(f"link parameter {key}: {exc}") from None


def _list(key: str, raw: str) -> list[str]:
    """A list field's value: a JSON list of strings."""
    try:
        items = json.loads(raw)
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise InputError(f'link parameter {key} is a JSON list of strings (e.g. ["END"]), got {raw[:40]!r}')
    return items


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


def link_request(link: RunLink) -> RunRequest:
    """The page's run a link describes, unchecked (`parse_link` checked it; its settings panel's beams kept)."""
    return RunRequest.of(prompt=link.prompt, chat=link.chat, system=link.system or None,
                         temperature=link.temperature, top_k=link.top_k, top_p=link.top_p, min_p=link.min_p,
                         seed=link.seed, max_new_tokens=link.max_new, **decoding_fields(link_decoding(link.decoding)))


def link_query(link: RunLink) -> str:
    """The query string (without '?') that `parse_link` reads back as `link`: its `RunRequest`'s JSON form, a
    key per field (the settings panel's only where they differ from the defaults), then the page's own keys."""
    doc, default = link_request(link).to_json(), RunRequest().to_json()
    values: dict[str, Any] = {k: doc[k] for k in RUN_KEYS if k in ("prompt", "chat") or doc[k] != default[k]
                              or k not in DECODING and k != "system"}
    values["chat"] = int(link.chat)
    values.update({k: json.dumps(v, ensure_ascii=False) for k, v in values.items() if k in LISTS})
    values["steps"] = link.steps
    if link.tokens:
        values.update(tokens=link.tokens, **({"branches": link.branches} if link.branches else {}), branch=link.branch)
    return urlencode(values)
