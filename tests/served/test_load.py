"""Load test: eight sessions at once on one real `python app.py` server: the Space bundle's, in its own venv (the
`space_app` fixture, shared with tests/served/test_space_e2e.py: one worker runs both files, SAME_WORKER in
tests/conftest.py), so the load runs on the app as the hosted demo serves it, without serving one more.

Each session is a greedy chat prompt of its own, prefilled and stepped through the page's own events
(`/ui_prefill`, `/ui_step`: what a browser triggers, and the path that runs each next forward ahead),
all eight in parallel. Asserted: no errors; every session's tokens equal that prompt's solo run (each
prompt run alone first, one after another, through the named API `/prefill` + `/step`, which runs no
forward ahead); the server's peak RSS, sampled from outside every 0.1 s, stays under `PEAK_RSS_BOUND`.
The solo runs' sessions stay live (idle, as visitors who left), so the eight parallel clients connect
(a page load each: GET /config) to a server that already holds sessions, as a shared Space does; that
is where a page config that dragged sessions into each copy made memory grow. Speed is not asserted here
(`python -m bench.load` prints it).
"""

from __future__ import annotations

import pytest

from harness.server_proc import RssSampler, prompt_for, run_parallel, run_sequential

pytestmark = pytest.mark.slow

SESSIONS = 8
STEPS = 6  # prefill (max new tokens 8), then six steps
MAX_NEW = 8
# A healthy server holds the model and runtime (~0.9-1.0 GB idle) plus eight small sessions (a 40-token
# chat prompt's KV cache and trace is ~15 MB), about 1.1-1.4 GB. A server whose page config copies drag
# sessions along grows to many GB under this load; 3 GB leaves about twice the healthy peak for
# allocator noise and still fails on that.
PEAK_RSS_BOUND = 3 * 2**30
GUARD = 6 * 2**30  # past this the sampler stops the server: a runaway must not take the shared machine down


def test_eight_parallel_sessions_match_their_solo_runs_within_memory(space_app):
    prompts = [prompt_for(i) for i in range(SESSIONS)]
    server = space_app.server
    with RssSampler(server, interval_s=0.1, kill_above=GUARD) as rss:
        solo = run_sequential(server.url, "api", prompts, STEPS, MAX_NEW)
        runs, _wall = run_parallel(server.url, "ui", prompts, STEPS, MAX_NEW)
        log = server.log_tail()
    assert server.killed_for is None, f"server stopped: {server.killed_for}"
    errors = [f"{r.prompt!r}: {r.error}" for r in solo + runs if r.error]
    assert not errors, "\n".join(errors) + "\n" + log
    expected = {r.prompt: r.generated_ids for r in solo}
    for r in runs:
        assert r.generated_ids == expected[r.prompt], (
            f"{r.prompt!r}: in parallel {r.generated_ids}, alone {expected[r.prompt]}")
        assert len(r.generated_ids) == 1 + STEPS or r.finished_early, r  # the prefill samples token 1
    assert rss.peak < PEAK_RSS_BOUND, f"peak RSS {rss.peak / 2**30:.2f} GB (bound {PEAK_RSS_BOUND / 2**30:.0f} GB)"
