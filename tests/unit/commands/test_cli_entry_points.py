"""Each `inspector` subcommand enters at its module's `main(args)` (a command's entry is its main; "run" is a
generation), `space`'s two at `build_main` and `deploy_main`: what `cli.main` dispatches to."""

from __future__ import annotations

import argparse
import importlib

from inspector.commands.cli import COMMANDS, build_parser


def _entries(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every leaf subcommand's `func`, by its path of names."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _entries(sub, (*path, name))
    if not found and path:
        found[path] = parser.get_default("func")
    return found


def test_every_subcommand_enters_at_its_main():
    entries = _entries(build_parser())
    assert len(entries) == len(COMMANDS) + 1  # space has two
    for path, func in entries.items():
        module = importlib.import_module(func.__module__)
        expected = "main" if path[0] != "space" else f"{path[1]}_main"
        assert func.__name__ == expected and getattr(module, expected) is func, (path, func)
        assert not hasattr(module, "run"), path  # no entry point left under its old name
