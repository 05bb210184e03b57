"""Soak: one session on Play for `--minutes` (10) on one `python app.py` server; is memory flat?

The session does what a visitor who keeps pressing Play does, through the page's own events: `/ui_prefill`
(a greedy chat prompt, the next of `harness.server_proc.PROMPTS` each round, max new tokens `--max-new`,
256 by default), then `/ui_play` (streaming) until Play stops by itself (max new tokens, EOS or a cap);
then again, until the time is up (a Play still running then is paused). The server's RSS (+ children) is
sampled from outside every second. Goal: RSS at the end within 10% of RSS after the first minute (for a
run of 2 minutes or less, the baseline is at half the run instead).

Prints: server torch version; RSS after the first minute, at the end, their ratio, the peak; RSS at each
minute; tokens generated (each round's prefill token and Play's), tokens/s over the whole run (prefills
included); rounds and why each Play stopped.

Usage: python -m bench.soak [--minutes 10] [--max-new 256] [--python /tmp/venv215/bin/python] [--app-dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

from inspector.units import GIB
from harness.server_proc import RssSampler, Server, UiSession, prompt_for, torch_version

ROOT = Path(__file__).resolve().parents[1]



def rss_at(samples: list[tuple[float, int]], t: float) -> int:
    """The first sample taken at or after monotonic time t (the last one if none was)."""
    return next((b for s, b in samples if s >= t), samples[-1][1])


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--max-new", type=int, default=256, help="max new tokens per round")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the server (its torch)")
    ap.add_argument("--app-dir", type=Path, default=ROOT, help="the tree whose app.py is served")
    ap.add_argument("--rss-guard-gb", type=float, default=10.0, help="stop the server if its RSS passes this many GiB")
    args = ap.parse_args()
    duration = args.minutes * 60
    baseline_s = 60.0 if duration > 120 else duration / 2

    print(f"server: {args.python} (torch {torch_version(args.python)}), app {args.app_dir}")
    print(f"one session, prefill + Play (max new tokens {args.max_new}) for {args.minutes:g} min; "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    env = {"INSPECTOR_MAX_STEPS": str(max(args.max_new, 256))}
    tokens, rounds, errors = 0, 0, []
    stops: collections.Counter[str] = collections.Counter()
    with Server(args.python, env=env, app_dir=args.app_dir) as server:
        session = UiSession(server.url)
        with RssSampler(server, interval_s=1.0, kill_above=int(args.rss_guard_gb * GIB)) as rss:
            t0 = time.monotonic()
            deadline = t0 + duration
            while time.monotonic() < deadline and server.alive():
                reply = session.prefill(prompt_for(rounds), args.max_new)
                if reply.error is None:
                    reply = session.play(deadline)
                rounds += 1
                if reply.error:
                    errors.append(reply.error)
                    time.sleep(1.0)  # bounded anyway by the deadline; do not spin on a failing server
                    continue
                tokens += len(reply.generated_ids)
                stops[reply.message or reply.phase] += 1
            elapsed = time.monotonic() - t0
        session.close()
        killed = server.killed_for

    samples = rss.samples
    base, end = rss_at(samples, t0 + baseline_s), samples[-1][1]
    print(f"\n| RSS after {baseline_s / 60:g} min GiB | RSS at end GiB | end / baseline | peak GiB | tokens | tok/s "
          "| rounds |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {base / GIB:.3f} | {end / GIB:.3f} | {end / base:.3f} | {rss.peak / GIB:.3f} | {tokens} | "
          f"{tokens / elapsed:.1f} | {rounds} |")
    print("\nRSS each minute (GiB): " + ", ".join(
        f"{m}: {rss_at(samples, t0 + 60 * m) / GIB:.3f}" for m in range(0, int(elapsed // 60) + 1)))
    print("Play stopped: " + "; ".join(f"{k} x{v}" for k, v in stops.most_common()))
    ok = end <= 1.10 * base and not errors and not killed
    print(f"goal (RSS at end within 10% of after {baseline_s / 60:g} min, no errors): {'yes' if ok else 'NO'}")
    if killed:
        print(f"server stopped: {killed}")
    for e in sorted(set(errors))[:10]:
        print(f"error: {e}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
