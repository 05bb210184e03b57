"""The one way a refused request reaches the page: a handler decorated with `@refuses` turns a refusal
into its owner's `refusal(message, sid)`: the status line says why, and nothing else on the page changes.

A refusal is an `InspectorError` (bad input, a cap, a busy or expired session: `inspector.validate`'s
NumberError among them) or a ValueError from a layer below that checks its own arguments (a token id
outside the vocabulary). The handler's first argument is its owner — a panel (`inspector.ui.panel`), or the
page's run (`inspector.ui.handlers.Handlers`) for the run's events and the functions of it — and its
second the browser session's id, which `refusal` gets to name the run's phase on the page's status line.
A generator handler (Play) stays a generator: a refusal ends it with one last update. `lead`: the handler
returns (one output, its updates), and a refusal's first output is `lead(sid)` (`keep_sid`: the session id
it was given). The script API's endpoints raise `gr.Error` instead (`api_error`): gradio_client raises it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any

from inspector.errors import InspectorError, first_line

REFUSALS: tuple[type[BaseException], ...] = (InspectorError, ValueError)


def keep_sid(sid: Any) -> Any:
    """The first output of a refused handler that returns (session id, updates): the id it was given."""
    return sid


def refuses(handler: Callable[..., Any] | None = None, *, lead: Callable[[Any], Any] | None = None,
            also: tuple[type[BaseException], ...] = ()) -> Any:
    """Decorator: a refusal (`REFUSALS`, and `also`: e.g. OSError for a file) returns or yields
    `owner.refusal(message, sid)` (see the module docstring)."""
    caught = REFUSALS + also

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        def reply(owner: Any, exc: BaseException, sid: Any) -> Any:
            out = owner.refusal(first_line(exc), sid)
            return (lead(sid), out) if lead is not None else out

        if inspect.isgeneratorfunction(handler):
            @wraps(handler)
            def stream(owner: Any, sid: Any = None, *args: Any, **kwargs: Any) -> Iterator[Any]:
                try:
                    yield from handler(owner, sid, *args, **kwargs)
                except caught as exc:
                    yield reply(owner, exc, sid)
            return stream

        @wraps(handler)
        def call(owner: Any, sid: Any = None, *args: Any, **kwargs: Any) -> Any:
            try:
                return handler(owner, sid, *args, **kwargs)
            except caught as exc:
                return reply(owner, exc, sid)
        return call
    return wrap if handler is None else wrap(handler)


def api_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The script API's endpoints: a refusal raises `gr.Error` with the one-line message."""
    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        import gradio as gr

        try:
            return fn(*args, **kwargs)
        except REFUSALS as exc:
            raise gr.Error(first_line(exc)) from None
    return call
