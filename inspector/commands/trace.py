"""`inspector trace FILE [--json]`: open a trace file saved by `inspector run --save-trace` or the web app.

No model is loaded: the run is read back from the file (`inspector.session.trace_file.load_trace`).
`--json` prints the object `inspector run --json` printed for that run (`inspector.commands.run.result_dict`);
without it, a short summary: model, settings, tokens, finish reason, timings.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from inspector.commands.flags import json_flags
from inspector.commands.run import result_dict


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trace", help="show a saved trace file (no model needed)",
                              description=__doc__.split("\n\n")[0], parents=[json_flags()])
    p.add_argument("file", metavar="FILE", help="a .safetensors trace file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from inspector.session.trace_file import load_trace

    session = load_trace(args.file)
    if args.json:
        print(json.dumps(result_dict(session), ensure_ascii=False))
    else:
        print("\n".join(summary_lines(session)))
    return 0


def summary_lines(session: Any) -> list[str]:
    """A few lines for a person: who recorded the run, with which settings, what came out, how fast."""
    model, settings = session.recorded_model, session.settings
    params = settings.get("params") or {}
    shown = ", ".join(f"{k} {v}" for k, v in params.items())
    tpot = session.tpot_ms
    speed = f", {1000 * len(tpot) / sum(tpot):.1f} tok/s" if tpot and sum(tpot) > 0 else ""
    lines = [
        f"model: {model['name']} ({model['dtype']}, weights {model['fingerprint'][:12]}, from {model['source']})",
        f"settings: {shown or 'no sample drawn'}; max new tokens {settings['max_new_tokens']}"
        + ("; chat" if settings.get("chat") else ""),
        f"prompt: {len(session.prompt_ids)} tokens; generated: {len(session.generated_ids)} tokens "
        f"in {len(session.records)} forwards, finished: {session.finished or 'not yet'}",
        f"time to first token {session.ttft_ms:.0f} ms{speed}",
        f"text: {session.text!r}",
    ]
    if settings.get("prompt") is not None:
        lines.insert(2, f"prompt text: {settings['prompt']!r}")
    return lines
