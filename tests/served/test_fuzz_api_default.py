"""Fuzz of the script API, `/prefill` and `/step` (inspector.ui.script_endpoints), on the real default model: the
cases of tests/support/api_fuzz.py whose server is "real" (odd prompts through SmolLM2's tokenizer and chat
template; the prompt cap) or "mem" (the memory cap by prompt and by steps; the session cap). The tiny model's
cases are tests/served/test_fuzz_api_tiny.py.

Both run on the default app of this test process (`app_demo`, which the browser tests open), each case with its
server's caps put in place while it runs (`tests.support.ui_server.caps_in_place`): the app as built with
those INSPECTOR_MAX_* variables, without serving another app. The fuzz's visitors leave at the end (their
sessions dropped, as a page unload drops one), so the tests after it find the app as before. Reproduce one
case: `pytest tests/served/test_fuzz_api_default.py -k cap-017` (its inputs are in the failure message).
"""

from __future__ import annotations

import time

import httpx
import pytest

from harness.net import api_client, tls_verify
from tests.support.api_fuzz import (LIMITS, NORMAL_PROMPT, Server, all_cases, health_after_fuzz, prefill_args,
                                    run_case, serve, serve_mem)
from tests.support.fuzz_inputs import short

pytestmark = pytest.mark.slow

CASES = [c for c in all_cases() if c.server in ("real", "mem")]


class DefaultServers:
    """"real" and "mem" on the default app, each made when a case first needs it."""

    def __init__(self, demo, loaded) -> None:
        self.demo, self.loaded = demo, loaded
        self.started: dict[str, Server] = {}

    def __getitem__(self, name: str) -> Server:
        if name not in self.started:
            self.started[name] = (serve_mem(self.demo, self.loaded) if name == "mem" else
                                  serve(name, self.demo, self.loaded, LIMITS[name], in_place=True))
        return self.started[name]


@pytest.fixture(scope="module")
def servers(app_demo, default_model):
    before = {v.sid for v in app_demo.store.live()}
    s = DefaultServers(app_demo, default_model)
    yield s
    for visitor in app_demo.store.live():  # the fuzz's visitors leave
        if visitor.sid not in before:
            app_demo.store.drop(visitor.sid)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_api_case(case, servers: DefaultServers):
    run_case(servers[case.server], case)


def test_servers_still_serve_after_fuzz(servers: DefaultServers):
    """At the end, on every server the fuzz used: the same normal request gives the same tokens as before."""
    problems = health_after_fuzz(servers.started)
    assert not any(problems.values()), problems


def test_new_visitor_after_fuzz(servers: DefaultServers):
    """A visitor arriving after the fuzz (sessions open) loads the page config quickly and is served."""
    srv = servers["real"]
    with srv.caps():
        t0 = time.perf_counter()
        try:
            status = httpx.get(f"{srv.url}config", timeout=10, verify=tls_verify(srv.url)).status_code
        except httpx.TimeoutException:
            status = "none (timed out)"
        elapsed = time.perf_counter() - t0
        assert status == 200 and elapsed < 5.0, (
            f"GET /config (a page load, or a new gradio_client.Client) with {len(srv.demo.store)} session(s) open "
            f"took {elapsed:.1f} s, status {status}")
        client = api_client(srv.url)
        outcome, out, _ = srv.predict("prefill", prefill_args(NORMAL_PROMPT, max_new=4), client=client)
    assert outcome == "ok" and out["generated_ids"] == srv.reference[0], short(out)
