"""Exceptions whose message is shown to the user as is (CLI: one line, exit 1; UI: the status line)."""


class InspectorError(Exception):
    """Base class: an error with a message meant for the user, not a traceback."""


class ModelLoadError(InspectorError):
    """A model source could not be found, read or converted."""


class UnsupportedConfigError(ModelLoadError):
    """A config.json key/value the engine does not implement (the message names key and value)."""


class InputError(InspectorError):
    """Bad user input: empty prompt, prompt past the context window, out-of-range setting, ..."""


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (its type's name when it has none), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
