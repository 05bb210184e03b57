"""Exceptions whose message is shown to the user as is (CLI: one line, exit 1; UI: the status line).

One rule for refusals: every refusal of what a user gave is an `InputError`, which is a `ValueError`; a value
of the wrong type (a string where a step index goes, a float for a token id) is an `InputTypeError`, an
`InputError` that is a `TypeError` too. So `except ValueError` / `except TypeError` work as in plain
Python, and `except InputError` catches both.
"""


class InspectorError(Exception):
    """Base class: an error with a message meant for the user, not a traceback."""


class ModelLoadError(InspectorError):
    """A model source could not be found, read or converted."""


class UnsupportedConfigError(ModelLoadError):
    """A config.json key/value the engine does not implement (the message names key and value)."""


class InputError(InspectorError, ValueError):
    """Bad user input: empty prompt, prompt past the context window, out-of-range setting, ..."""


class InputTypeError(InputError, TypeError):
    """User input of the wrong type (the message names what was expected and what was given)."""


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (its type's name when it has none), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
