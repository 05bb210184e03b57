"""Load benchmark: N concurrent sessions on one `python app.py` server; prints a markdown table.

Each session is a greedy chat prompt of its own (`harness.server_proc.PROMPTS`): prefill, then `--steps`
Steps, all N sessions at once (one gradio_client client and thread each; they connect first and start
together). Modes: `ui` drives the page's own events (`/ui_prefill`, `/ui_step`: what a browser sends,
with the open tab's views, and the path that runs each next forward ahead); `api` the named script API
(`/prefill`, `/step`).

Servers (`--server`): `shared` (default) keeps one server per setting for the whole run, as a hosted
Space lives: each row's sessions are new visitors (a page load each: GET /config) on a server that has
served the rows before and still holds their idle sessions until it evicts them (today, the 16-session
row then meets INSPECTOR_MAX_SESSIONS=16). `fresh` starts a new server for every row (rows independent).
Servers run `--app-dir`'s app.py with `--python`. A server's first session warms it up (a prefill and a
Step before the clock starts: a fresh server's first forwards take seconds; its measured prefill then
replaces that run, so no extra session). The peer of each row, the same load on a server with
INSPECTOR_RUN_AHEAD=0, runs right before or after it (the order alternates from one N to the next, so a
slow spell on a shared machine hits both).

Columns: whether the row's server is new (started for it: the first row, `fresh`, or after the guard
stopped the last one) or kept from the rows before; the server's RSS (process + children, sampled every
0.1 s from outside) when the row started, its peak during the row, and when the load ended; wall time
from the start to the last session's end; generated tokens (the prefill's first token and one per Step)
over that wall time; p50/p95 of the latency of every Step request (all sessions pooled) as a client sees
it; p50 of the prefill requests; sessions that ended in an error. A server whose RSS passes
`--rss-guard-gb` is stopped (its sessions then fail; the next row starts a new one): the machine is
shared.

Labs (`--labs on`, the default): after its prefill and Steps, each visitor opens every lab in the same
browser session, as a visitor clicking through the tabs would (`bench.load_labs.open_labs`: Speculative,
Serving, Quantization, KV policies, Interventions, Training, Models and the Beams view; the shared int8 model
is built by the first visitor and reused by the rest). Their events have no API name, so they are called by
the index of the event whose button has the tab's elem_id (`lab_endpoints`). The row's wall time and
tokens/s count the prefill and Steps only; the labs' requests have their own p50 and errors, and the RSS
columns include what they hold. `--labs off` gives the load without them.

Goals checked below the table, on the run-ahead rows: 8 sessions peak RSS under 2.5 GB; with every lab open,
the RSS grown over the row stays within the server's cap (INSPECTOR_MAX_SESSIONS x INSPECTOR_MAX_TRACE_MB,
what admission holds every session and lab to); 16 sessions complete with no error; aggregate tokens/s at 8
sessions >= at 1.

Usage: python -m bench.load [--sessions 1,2,4,8,16] [--steps 16] [--mode ui|api|both] [--server shared|fresh]
                            [--labs on|off] [--python /tmp/venv215/bin/python] [--app-dir DIR] [--rss-guard-gb 10]
Quick look: python -m bench.load --sessions 1,2 --steps 2 --mode api
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_CAP = 16 * 320 * 2**20  # the app's defaults: INSPECTOR_MAX_SESSIONS x INSPECTOR_MAX_TRACE_MB MiB

from bench.load_labs import LabCall, run_parallel_with_labs
from harness.server_proc import RssSampler, Server, prompt_for, torch_version

GB = 2**30
SETTINGS = {"on": {}, "off": {"INSPECTOR_RUN_AHEAD": "0"}}  # run-ahead column -> server environment


@dataclass
class Row:
    sessions: int
    mode: str
    run_ahead: str
    idle_rss: int = 0
    peak_rss: int = 0
    end_rss: int = 0
    wall_s: float = 0.0
    tokens: int = 0
    step_ms: list[float] = field(default_factory=list)
    prefill_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    labs: list[LabCall] = field(default_factory=list)
    killed: str | None = None
    new_server: bool = False  # the server was started for this row (first row, `fresh`, or after the guard)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


class Servers:
    """The server of each run-ahead setting: one for the whole run (`shared`), or a new one per row (`fresh`);
    a server that died (the RSS guard) is replaced at the next row."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.live: dict[str, Server] = {}

    def get(self, run_ahead: str) -> tuple[Server, bool]:
        """(the server, whether it was just started and still needs its warm-up)."""
        server = self.live.get(run_ahead)
        if server is not None and server.alive() and self.args.server == "shared":
            return server, False
        if server is not None:
            server.close()
        server = Server(self.args.python, env=SETTINGS[run_ahead], app_dir=self.args.app_dir).start()
        self.live[run_ahead] = server
        return server, True

    def close(self) -> None:
        for server in self.live.values():
            server.close()


def measure(servers: Servers, n: int, mode: str, run_ahead: str, args: argparse.Namespace) -> Row:
    """One row: n sessions at once on the setting's server, its RSS sampled throughout."""
    row = Row(n, mode, run_ahead)
    prompts = [prompt_for(i) for i in range(n)]
    server, row.new_server = servers.get(run_ahead)
    row.idle_rss = server.rss()
    with RssSampler(server, interval_s=0.1, kill_above=int(args.rss_guard_gb * GB)) as rss:
        runs, row.labs, row.wall_s = run_parallel_with_labs(server.url, mode, prompts, args.steps,
                                                            warmup=row.new_server, labs=args.labs == "on")
    row.peak_rss, row.end_rss, row.killed = rss.peak, server.rss(), server.killed_for
    for r in runs:
        row.tokens += len(r.generated_ids)
        row.step_ms += r.step_ms
        row.prefill_ms += [r.prefill_ms] if r.prefill_ms is not None else []
        if r.error:
            row.errors.append(r.error)
    return row


def fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f}"


def table(rows: list[Row]) -> str:
    head = ("| sessions | mode | run-ahead | server | RSS before GB | peak RSS GB | RSS at end GB | wall s | tokens "
            "| aggregate tok/s | step p50 ms | step p95 ms | prefill p50 ms | errors | lab requests p50 ms "
            "| lab errors |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        errors = f"{len(r.errors)}/{r.sessions}" + (f" (server stopped: {r.killed})" if r.killed else "")
        lines.append(f"| {r.sessions} | {r.mode} | {r.run_ahead} | {'new' if r.new_server else 'kept'} | "
                     f"{r.idle_rss / GB:.2f} | {r.peak_rss / GB:.2f} | {r.end_rss / GB:.2f} | "
                     f"{r.wall_s:.1f} | {r.tokens} | {r.tok_s:.1f} | {fmt_ms(percentile(r.step_ms, 50))} | "
                     f"{fmt_ms(percentile(r.step_ms, 95))} | {fmt_ms(percentile(r.prefill_ms, 50))} | {errors} | "
                     f"{fmt_ms(percentile([c.ms for c in r.labs], 50))} | "
                     f"{sum(1 for c in r.labs if c.error)}/{len(r.labs)} |")
    return "\n".join(lines)


def goals(rows: list[Row]) -> list[str]:
    """Issue 11's goals, for each mode, on the run-ahead rows (the server as shipped)."""
    out = []
    for mode in dict.fromkeys(r.mode for r in rows):
        by_n = {r.sessions: r for r in rows if r.mode == mode and r.run_ahead == "on"}
        if 8 in by_n:
            r = by_n[8]
            ok = r.peak_rss < 2.5 * GB and not r.errors and not r.killed  # a failed session is no load
            failed = f", {len(r.errors)} sessions failed" if r.errors else ""
            out.append(f"- [{mode}] 8 sessions peak RSS {r.peak_rss / GB:.2f} GB < 2.5 GB{failed}: "
                       f"{'yes' if ok else 'NO'}")
        for n in (8, 16):
            r = by_n.get(n)
            if r is not None and r.labs:  # every visitor opened every lab: what the server holds stays in its cap
                grown = r.peak_rss - r.idle_rss
                out.append(f"- [{mode}] {n} sessions with every lab: RSS grew {grown / GB:.2f} GB <= the server's cap "
                           f"{SERVER_CAP / GB:.2f} GB (INSPECTOR_MAX_SESSIONS x INSPECTOR_MAX_TRACE_MB): "
                           f"{'yes' if grown <= SERVER_CAP else 'NO'}")
        if 16 in by_n:
            r = by_n[16]
            ok = not r.errors and not r.killed
            note = " (on a server started for this row)" if r.new_server else ""
            out.append(f"- [{mode}] 16 sessions complete with no error{note}: "
                       f"{'yes' if ok else f'NO ({len(r.errors)} failed)'}")
        if 1 in by_n and 8 in by_n:
            a, b = by_n[1].tok_s, by_n[8].tok_s
            out.append(f"- [{mode}] aggregate tok/s at 8 sessions ({b:.1f}) >= at 1 ({a:.1f}): "
                       f"{'yes' if b >= a else 'NO'}")
    return out


def describe_tree(app_dir: Path) -> str:
    out = subprocess.run(["git", "-C", str(app_dir), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if out.returncode != 0 or app_dir.resolve() != ROOT:
        return str(app_dir)
    dirty = subprocess.run(["git", "-C", str(app_dir), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{app_dir} at {out.stdout.strip()}{' + uncommitted changes' if dirty else ''}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1,2,4,8,16", help="comma-separated session counts")
    ap.add_argument("--steps", type=int, default=16, help="Steps per session after its prefill")
    ap.add_argument("--mode", choices=["ui", "api", "both"], default="ui")
    ap.add_argument("--server", choices=["shared", "fresh"], default="shared",
                    help="one server per setting for the whole run, or a new one per row")
    ap.add_argument("--labs", choices=["on", "off"], default="on",
                    help="each visitor also runs Speculative Start + Round and Quantization Run")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the server (its torch)")
    ap.add_argument("--app-dir", type=Path, default=ROOT, help="the tree whose app.py is served")
    ap.add_argument("--rss-guard-gb", type=float, default=10.0, help="stop a server whose RSS passes this")
    args = ap.parse_args()
    ns = [int(x) for x in args.sessions.split(",") if x.strip()]
    modes = ["ui", "api"] if args.mode == "both" else [args.mode]

    print(f"server: {args.python} (torch {torch_version(args.python)}), app {describe_tree(args.app_dir)}")
    print(f"{args.steps} steps per session (max new tokens {args.steps + 1}), greedy chat prompts, "
          f"{args.server} servers; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    rows: list[Row] = []
    t0 = time.perf_counter()
    servers = Servers(args)
    try:
        for i, n in enumerate(ns):
            for mode in modes:
                for run_ahead in (["on", "off"] if i % 2 == 0 else ["off", "on"]):
                    row = measure(servers, n, mode, run_ahead, args)
                    rows.append(row)
                    print(f"  measured: {n} sessions, {mode}, run-ahead {run_ahead}: peak {row.peak_rss / GB:.2f} GB, "
                          f"{row.wall_s:.1f} s, {len(row.errors)} errors", flush=True)
    finally:
        servers.close()
    rows.sort(key=lambda r: (r.sessions, r.mode, r.run_ahead != "on"))
    print()
    print(table(rows))
    print()
    print("\n".join(goals(rows)))
    errors = sorted({e for r in rows for e in r.errors} | {f"{c.name}: {c.error}" for r in rows for c in r.labs
                                                           if c.error})
    if errors:
        print("\nerrors seen:")
        for e in errors[:10]:
            print(f"- {e}")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
