"""One way a refused request reaches the page: `shows_refusals(reply)` wraps a handler so that its refusal
becomes its outputs with the message on the status line, never an exception in Gradio's log.

A refusal is an `InspectorError` (bad input, a cap, a busy or expired session: `inspector.validate`'s
NumberError among them) or a ValueError from a layer below that checks its own arguments (a token id
outside the vocabulary). `reply(message, *args, **kwargs)` gets the one-line message and the handler's own
arguments (a method's `self` first) and returns what the handler's outputs are on a refusal: the views
with the status line, a tab's status and skipped figures, or a `gr.Error` raised for the script API.
A generator handler (Play) stays a generator: a refusal ends it with one last update.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import gradio as gr

from inspector.errors import InspectorError, first_line

REFUSALS = (InspectorError, ValueError)
H = TypeVar("H", bound=Callable[..., Any])


def shows_refusals(reply: Callable[..., Any], refusals: tuple[type[BaseException], ...] = REFUSALS) -> Callable[[H], H]:
    """Decorator: the handler's refusal returns (or, for a generator, yields) `reply(message, *args, **kwargs)`.
    `refusals`: the exceptions that count as one (a file handler adds OSError: an unreadable upload)."""
    def wrap(handler: H) -> H:
        if inspect.isgeneratorfunction(handler):
            @wraps(handler)
            def stream(*args: Any, **kwargs: Any) -> Any:
                try:
                    yield from handler(*args, **kwargs)
                except refusals as exc:
                    yield reply(first_line(exc), *args, **kwargs)
            return stream  # type: ignore[return-value]

        @wraps(handler)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except refusals as exc:
                return reply(first_line(exc), *args, **kwargs)
        return call  # type: ignore[return-value]
    return wrap


def raise_for_api(message: str, *args: Any, **kwargs: Any) -> Any:
    """The script API's reply to a refusal: `gr.Error` with the one-line message (gradio_client raises it)."""
    raise gr.Error(message)
