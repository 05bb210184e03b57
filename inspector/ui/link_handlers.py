"""Opening the page from a link that reproduces a run (`inspector.ui.run_links`).

`LinkHandlers` is mixed into `inspector.ui.handlers.Handlers`. On page load `link_fill` reads the URL's
query: it fills the controls (prompt, chat, system prompt, sampling, max new tokens) and keeps the run in a
`gr.State`; `link_run` then prefills and steps exactly as a visitor pressing the buttons would (same caps,
same session). A bad link leaves the controls as they are and says why in the status line.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import gradio as gr

from inspector.errors import InspectorError
from inspector.ui.inputs import parse_params
from inspector.ui.run_links import KEYS, link_decoding, parse_link

CONTROLS = KEYS[:-1]  # the controls a link fills, in order: prompt ... max_new (steps is not a control)


class LinkHandlers:
    """The page-load events of a run link (needs the Handlers' prefill, step and views)."""

    def link_fill(self, request: gr.Request) -> list:
        """Control values from the URL (skipped when it names no run), then the run itself (dict), an error
        message (str) or None for the State that `link_run` reads."""
        try:
            link = parse_link(dict(request.query_params) if request is not None else {})
        except ValueError as exc:
            return [gr.skip()] * len(CONTROLS) + [str(exc)]
        if link is None:
            return [gr.skip()] * len(CONTROLS) + [None]
        values = asdict(link)
        return [values[k] for k in CONTROLS] + [values]

    def link_run(self, sid, link: Any, layer, head) -> list:
        """Prefill and step the linked run in this browser session; [sid] + the views."""
        if link is None:
            return [gr.skip()] * (1 + len(self.view_keys))
        entry = self.store.get(sid)
        if isinstance(link, str):
            return [gr.skip()] + self.error_views(entry, ValueError(link))
        try:
            params = parse_params(link["temperature"], link["top_k"], link["top_p"], link["min_p"], link["seed"])
            sid, linked = self.store.get_or_create(sid)
            linked.labs["decoding"] = link_decoding(link.get("decoding", ""))  # the panel's settings, for the prefill
            sid, entry = self.run_prefill(sid, link["prompt"], link["chat"], link["system"], params,
                                          link["max_new"])
            steps = min(int(link["steps"]), entry.max_new_tokens - 1)
            for _ in range(steps):
                if entry.session.finished:
                    break
                self.run_step(sid, params)
            note = f"opened from a link: prefill + {len(entry.session.records) - 1} steps"
            views = self.views(entry, layer, head, note)
            self.queue_forward_ahead(entry)
            return [sid] + views
        except (InspectorError, ValueError) as exc:
            return [sid] + self.error_views(entry, exc)
