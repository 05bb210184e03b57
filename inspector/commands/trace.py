"""`inspector trace FILE [--json]`: open a trace file saved by `inspector run --save-trace` or the web app.

No model is loaded: the run is read back from the file (`inspector.open_trace`, the Python API's).
`--json` prints the object `inspector run --json` printed for that run (`inspector.commands.run.result_dict`),
with "branches" and "shown_branch" added when the file kept a branch tree (the web app's Save trace);
without it, a short summary: model, settings, tokens, finish reason, timings, and a line per branch.
"""

from __future__ import annotations

import argparse
from typing import Any

from inspector.commands.flags import json_flags, json_text
from inspector.commands.run import result_dict


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trace", help="show a saved trace file (no model needed)",
                              description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter, parents=[json_flags()])
    p.add_argument("file", metavar="FILE", help="a .safetensors trace file")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from inspector.api.traces import open_trace

    session = open_trace(args.file).session
    if args.json:
        out = result_dict(session)
        tree = session.saved_tree
        if tree is not None and len(tree.branches) > 1:
            out["branches"] = [branch_dict(i, b) for i, b in enumerate(tree.branches)]
            out["shown_branch"] = tree.current
        print(json_text(out))
    else:
        print("\n".join(summary_lines(session) + branch_lines(session)))
    return 0


def branch_dict(index: int, branch: Any) -> dict:
    """One saved branch as JSON: where it forks from its parent and what it generated."""
    return {"branch": index, "parent": branch.parent, "at_step": branch.at_step, "forced_id": branch.forced_id,
            "forced_piece": branch.forced_piece, "generated_ids": list(branch.generated_ids), "text": branch.text}


def branch_lines(session: Any) -> list[str]:
    """A line per branch of the file's tree (none for a run of one branch); the shown one marked."""
    tree = session.saved_tree
    if tree is None or len(tree.branches) < 2:
        return []
    lines = [f"branches: {len(tree.branches)} (the file's tokens are branch {tree.current}'s)"]
    for i, b in enumerate(tree.branches):
        where = "the run" if b.parent is None else \
            f"from branch {b.parent} at step {b.at_step}, forced {b.forced_piece!r} (id {b.forced_id})"
        mark = " [shown]" if i == tree.current else ""
        lines.append(f"  branch {i}{mark}: {where}: {len(b.generated_ids)} tokens, text {b.text!r}")
    return lines


def summary_lines(session: Any) -> list[str]:
    """A few lines for a person: who recorded the run, with which settings, what came out, how fast."""
    model, settings = session.recorded_model, session.settings
    params = settings.get("params") or {}
    shown = ", ".join(f"{k} {v}" for k, v in params.items())
    tpot = session.tpot_ms
    speed = (f", {1000 * len(tpot) / sum(tpot):.1f} tok/s over the decode steps (forward + draw)"
             if tpot and sum(tpot) > 0 else "")
    lines = [
        f"model: {model['name']} ({model['dtype']}, weights {model['fingerprint'][:12]}, from {model['source']})",
        f"settings: {shown or 'no sample drawn'}; max new tokens {settings['max_new_tokens']}"
        + ("; chat" if settings.get("chat") else ""),
        f"prompt: {len(session.prompt_ids)} tokens; generated: {len(session.generated_ids)} tokens "
        f"in {len(session.records)} forwards, finished: {session.finished or 'not yet'}",
        f"time to first token {session.ttft_ms:.0f} ms (tokenize + prefill + first draw){speed}",
        f"text: {session.text!r}",
    ]
    if settings.get("prompt") is not None:
        lines.insert(2, f"prompt text: {settings['prompt']!r}")
    return lines
