"""Fuzz of the script API, `/prefill` and `/step` (inspector.ui.script_endpoints), on the tiny random mixture of
experts (`tiny_moe_app`, shared with the Routing tab's browser test: one worker runs both files, SAME_WORKER in
tests/conftest.py): the cases of tests/support/api_fuzz.py whose server is "tiny", most of them (no case's outcome
depends on the model, and its forwards cost milliseconds). The cases on the real default model ("real", "mem")
are tests/served/test_fuzz_api_default.py.

Every case is generated from the seed in tests/support/fuzz_inputs.py, through gradio_client and, for what
gradio_client cannot send (NaN, Infinity, a wrong number of inputs), raw JSON posted to
`/gradio_api/call/<endpoint>`; it must end in a result or in a one-line error that names the problem
(`fuzz_inputs.error_problems`). Every HEALTH_EVERY cases, and at the end, the same normal request as before the
fuzz gives the same tokens, so the server neither died nor kept bad state. Reproduce one case:
`pytest tests/served/test_fuzz_api_tiny.py -k prompt-017` (its inputs are in the failure message).
The fuzz's clients are opened when it first needs the app, before its own requests (the app may hold the
browser test's sessions then).
"""

from __future__ import annotations

import pytest

from harness.net import api_client
from tests.support.api_fuzz import LIMITS, UNIT, Server, all_cases, health_after_fuzz, prefill_args, run_case, serve
from tests.support.fuzz_inputs import short

pytestmark = pytest.mark.slow

CASES = [c for c in all_cases() if c.server == "tiny"]


@pytest.fixture(scope="module")
def tiny(tiny_moe_app) -> Server:
    """The fuzz's view of the tiny app (which closes with the test process: `tiny_moe_app`)."""
    return serve("tiny", tiny_moe_app.demo, tiny_moe_app.loaded, LIMITS["tiny"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_api_case(case, tiny: Server):
    run_case(tiny, case)


def test_refused_requests_hold_no_session(tiny: Server):
    """A visitor whose requests are all refused holds no session: refusals cost no slot (the session cap)."""
    srv = tiny
    before = len(srv.demo.store)
    client = api_client(srv.url)
    refused = [prefill_args(""), prefill_args("   "), prefill_args("Hello", max_new=0),
               prefill_args("Hello", max_new=9), prefill_args(UNIT * 300),
               prefill_args("Hello", params=[-1, 0, 1, 0, 0]), prefill_args("Hello", params=[0, 0, 1, 0, -5])]
    problems = []
    for args in refused:
        outcome, value, _ = srv.predict("prefill", args, client=client)
        if outcome != "error":
            problems.append(f"{short(args)} was accepted")
        if len(srv.demo.store) != before:
            problems.append(f"after {short(args)} -> {short(value)}: {len(srv.demo.store) - before} new session(s)")
            before = len(srv.demo.store)
    assert not problems, "; ".join(problems)


def test_servers_still_serve_after_fuzz(tiny: Server):
    """At the end: the same normal request gives the same tokens as before the fuzz."""
    problems = health_after_fuzz({"tiny": tiny})
    assert not any(problems.values()), problems
