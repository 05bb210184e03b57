"""The `inspector` command: subcommands live in `inspector/commands/<name>.py`, each exposing
`register(subparsers)` (adds its parser and sets `func`) and a `run(args) -> int`.

Errors meant for the user (`InspectorError`, bad arguments) print one line and exit non-zero, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from inspector.errors import InspectorError

COMMANDS = ("info", "run", "space", "memory")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inspector", description="Inference Inspector: watch an LLM generate.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"inspector.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InspectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
