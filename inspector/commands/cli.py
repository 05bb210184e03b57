"""The `inspector` command: subcommands live in `inspector/commands/<name>.py`, each exposing
`register(subparsers)` (adds its parser and sets `func`) and its entry point `main(args) -> int`. A command
is a thin layer over the Python API: its flags parsed, then the public `inspector.load(...)` and a `Model`
method (or `Model.start` for a run, `inspector.open_trace` for a trace file), then its output formatted.

Errors meant for the user (`InspectorError`, bad arguments, a file the system cannot open) print one line
and exit non-zero, never a traceback: 1 for an error while running, 2 for bad arguments (argparse's code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from inspector.errors import InspectorError

COMMANDS = ("info", "run", "space", "memory", "serve_sim", "trace", "quant", "kv_eval", "patch", "attribute", "loss", "heads")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the usage block, then the error)."""

    def error(self, message: str) -> NoReturn:
        one_line = message.replace("\r", "\\r").replace("\n", "\\n")  # `unrecognized arguments` quotes argv raw
        self.exit(2, f"error: {self.prog}: {one_line} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="inspector", description="Inference Inspector: watch an LLM generate.")
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
    except OSError as exc:  # e.g. a --model path too long for the file system, a folder not writable
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
