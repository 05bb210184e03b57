"""Links that reproduce a run: the page's settings as URL query parameters, and back.

`?prompt=Why+is+the+sky+blue%3F&chat=1&temperature=0.7&top_k=40&top_p=0.9&min_p=0&seed=3&max_new=32&steps=8`
opened on the page fills the controls, runs the prefill and then `steps` decode steps: the same tokens as
the run the link was made from (sampling is seeded per position, `inspector.engine.sampling.generator_for`).
Every key is optional but `prompt`; unknown keys are ignored (a link can carry tracking parameters).
`link_query(...)` writes such a query; `parse_link(query)` reads one into a `RunLink` with the page's
defaults filled in, or raises InputError naming the bad parameter. Numbers go through the page's own
fields (`inspector.ui.fields`): a link takes what the page's controls take. The page builds its "link to this run"
from the same keys (static/app.js).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from urllib.parse import urlencode

from inspector.errors import InputError
from inspector.ui.fields import MAX_NEW, SAMPLING_UI, STEPS
from inspector.validate import Bound

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
    return RunLink(prompt=query["prompt"], chat=chat_raw in TRUE, system=query.get("system") or "",
                   **{key: value for key, value in values.items() if value is not None})


def link_query(link: RunLink) -> str:
    """The query string (without '?') that `parse_link` reads back as `link`."""
    values = asdict(link)
    values["chat"] = int(link.chat)
    if not link.system:
        del values["system"]
    return urlencode(values)
