"""Opening the page from a link that reproduces a run (`inspector.ui.run_links`).

`link_fill(h, ...)` and `link_run(h, ...)` are functions of the app's handlers `h`
(`inspector.ui.handlers.Handlers` binds them as its methods). On page load `link_fill` reads the URL's
query: it fills the controls (prompt, chat, system prompt, sampling, max new tokens) and keeps the run in a
`gr.State`; `link_run` then prefills and steps exactly as a visitor pressing the buttons would (same caps,
same session). A bad link leaves the controls as they are and says why in the status line.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import gradio as gr

from inspector.errors import InspectorError
from inspector.ui.fields import sampling_params
from inspector.ui.refusals import shows_refusals
from inspector.ui.run_links import KEYS, parse_link

CONTROLS = KEYS[:-1]  # the controls a link fills, in order: prompt ... max_new (steps is not a control)


def link_fill(h: Any, request: gr.Request) -> list:
    """Control values from the URL (skipped when it names no run), then the run itself (dict), an error
    message (str) or None for the State that `link_run` reads."""
    try:
        link = parse_link(dict(request.query_params) if request is not None else {})
    except InspectorError as exc:
        return [gr.skip()] * len(CONTROLS) + [str(exc)]
    if link is None:
        return [gr.skip()] * len(CONTROLS) + [None]
    values = asdict(link)
    return [values[k] for k in CONTROLS] + [values]


@shows_refusals(lambda message, h, sid, *_: [sid] + h.error_views(h.store.get(sid), message))
def link_run(h: Any, sid: Any, link: Any, layer: Any, head: Any) -> list:
    """Prefill and step the linked run in this browser session; [sid] + the views."""
    if link is None:
        return [gr.skip()] * (1 + len(h.view_keys))
    if isinstance(link, str):
        return [gr.skip()] + h.error_views(h.store.get(sid), link)
    params = sampling_params(link["temperature"], link["top_k"], link["top_p"], link["min_p"], link["seed"])
    sid, entry = h.run_prefill(sid, link["prompt"], link["chat"], link["system"], params, link["max_new"])
    for _ in range(min(link["steps"], entry.max_new_tokens - 1)):
        if entry.session.finished:
            break
        h.run_step(sid, params)
    note = f"opened from a link: prefill + {len(entry.session.records) - 1} steps"
    views = h.views(entry, layer, head, note)
    h.queue_forward_ahead(entry)
    return [sid] + views
