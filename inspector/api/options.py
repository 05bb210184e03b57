"""Keyword arguments -> the CLI's flags: the Python API takes every lever by the CLI flag's name, meaning,
default and range, read from the CLI's own flag definitions (`inspector.commands.flags`, `run_flags`).

`Flags(parsers)` holds the argparse actions of some flag groups, by dest (`--top-p` is `top_p`).
`Flags.namespace(given, **fixed)` is the `argparse.Namespace` the CLI would have parsed: each given value
checked by its flag's own check (a numeric flag's `Bound`, a flag's choices, a switch's True/False; a
repeatable flag takes one value or a list, and `logit_bias` a dict {id: bias} too), every other flag at its CLI default. Unknown names, bad types
and out-of-range values raise `InputError` in one line naming the keyword, what is allowed and what was
given. `keyword_errors()` turns the CLI's own refusals ("--num-beams runs greedy beam search ... drop
--stop") into the keywords' names ("num_beams ... drop stop") when an API call reuses a CLI check.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from inspector.errors import InputError, first_line
from inspector.validate import Bound, NumberError, shown

FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def keyword(text: str) -> str:
    """A CLI message with every `--flag-name` written as the keyword `flag_name`."""
    return FLAG.sub(lambda m: m.group(1).replace("-", "_"), text)


@contextlib.contextmanager
def keyword_errors() -> Iterator[None]:
    """Re-raise an InputError from a CLI check with keyword names instead of flags (its class kept: an
    `InputTypeError` stays a TypeError)."""
    try:
        yield
    except InputError as exc:
        raise type(exc)(keyword(first_line(exc))) from None


class Flags:
    """The flags of some CLI flag groups (argparse parent parsers), by dest."""

    def __init__(self, parsers: Sequence[argparse.ArgumentParser], skip: Sequence[str] = ()) -> None:
        self.actions = {a.dest: a for p in parsers for a in p._actions  # argparse keeps them only here
                        if a.dest != "help" and a.dest not in skip}

    @property
    def names(self) -> list[str]:
        """Every keyword these flags take, in the CLI's order."""
        return list(self.actions)

    def defaults(self) -> dict[str, Any]:
        return {name: a.default for name, a in self.actions.items()}

    def namespace(self, given: Mapping[str, Any], also: Sequence[str] = (), **fixed: Any) -> argparse.Namespace:
        """The CLI's Namespace for these keyword values (see the module docstring); `fixed` sets values the
        caller decides (not checked here); `also` names the caller's own keywords for the unknown-name message."""
        ns = argparse.Namespace(**self.defaults(), **fixed)
        for name, value in given.items():
            if name not in self.actions:
                raise InputError(f"unknown keyword {name!r}: the keywords are {', '.join([*self.names, *also])}")
            setattr(ns, name, self.value(name, value))
        return ns

    def value(self, name: str, value: Any) -> Any:
        """One keyword's value, checked as its flag checks it."""
        action = self.actions[name]
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, bool):
                raise InputError(f"{name} must be True or False, got {shown(value)}")
            return value
        if isinstance(action, argparse._AppendAction):
            if isinstance(value, Mapping):  # logit_bias={id: v} for ["ID=V", ...]
                value = [f"{k}={v}" for k, v in value.items()]
            items = [value] if isinstance(value, (str, int, float)) else value
            if not isinstance(items, (list, tuple)):
                raise InputError(f"{name} takes one value or a list of them, got {shown(value)}")
            return [self._one(name, action, v) for v in items]
        if value is None and action.default is None:
            return None
        return self._one(name, action, value)

    @staticmethod
    def _one(name: str, action: argparse.Action, value: Any) -> Any:
        bound = getattr(action.type, "__self__", None)  # a numeric flag's type is `Bound.argparse`
        if isinstance(bound, Bound):
            try:
                value = bound.parse(value)
            except NumberError as exc:
                text = str(exc)
                raise InputError(name + text[len(bound.name):] if text.startswith(bound.name) else text) from None
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and action.choices is None:
            value = str(value)  # "ID=V", "L.H", a layer: the CLI reads them as text
        elif not isinstance(value, str):
            raise InputError(f"{name} must be a string, got {shown(value)}")
        if action.choices is not None and value not in action.choices:
            raise InputError(f"{name} must be one of {', '.join(map(str, action.choices))}, got {shown(value)}")
        return value


def _run_flags() -> Flags:
    from inspector.commands import flags as cli
    from inspector.commands.run import run_flags

    # `inspector run`'s flags a run takes as keywords (the model's own: model, device, dtype, attention, are
    # `load()`'s; --save-trace is `Run.save`; --json and --prompt are not options here)
    return Flags([cli.prompt_flags(), cli.chat_flags(), cli.max_new_tokens_flags(64), cli.sampling_flags(),
                  cli.decoding_flags(), cli.intervention_flags(), run_flags()],
                 skip=("prompt", "dtype", "attention", "save_trace"))


def _load_flags() -> Flags:
    from inspector.commands import flags as cli
    from inspector.commands.run import run_flags

    return Flags([cli.model_flags(), run_flags()])  # load() takes dtype, device and attention of them


RUN_FLAGS = _run_flags()
LOAD_FLAGS = _load_flags()
POLICY_KEYWORDS = ("policy", "budget", "sinks")  # `inspector kv-eval`'s flags, the eviction policies only
