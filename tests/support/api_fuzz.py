"""The API fuzz's machinery (tests/served/test_fuzz_api_tiny.py and test_fuzz_api_default.py run it): the
cases, generated from the seed in tests/support/fuzz_inputs.py, the fuzz's view of a served app (`Server`: its
clients, the normal request's tokens before any case), what each case must end in, and the scenarios of several
calls. `run_case(srv, case)` runs one case and fails the test with every problem found.

The apps and their caps (INSPECTOR_MAX_* values, `LIMITS`), small so that "just under" and "just over" every cap
is cheap:
- real: SmolLM2-135M-Instruct, 64 prompt tokens, 8 new tokens: odd prompts through its tokenizer and chat
  template, and the prompt cap.
- tiny: the tiny random mixture of experts of tests/support/tiny.py (`tiny_moe_app` of tests/conftest.py, which
  the Routing tab's browser test opens too), whose context window is 256 tokens, with a prompt cap above it
  (1024), 8 new tokens (`TINY_APP_CAPS`). Most cases run here: no case's outcome depends on the model, and its
  forwards cost milliseconds.
- mem: SmolLM2 again with a memory cap (INSPECTOR_MAX_TRACE_MB) 1-2 MB above what a one-token prompt holds
  (in a session's share, when the labs hold shared models), and 3 sessions: the memory cap (by prompt and by
  steps) and the session cap.
"real" and "mem" are the default app of the test process (`app_demo`) with those caps put in place while their
cases run (`caps_in_place`, tests/support/ui_server.py); "tiny" is an app built with its caps.
"""

from __future__ import annotations

import json
import math
import random
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from harness.net import api_client, tls_verify
from tests.support.fuzz_inputs import ODD_TEXT, SEED, UNIT, Expect, error_problems, has_controls, odd_text, short
from tests.support.ui_server import TINY_APP_CAPS, caps_in_place

HEALTH_EVERY = 40  # cases per server between two checks that a normal request still works
CALL_TIMEOUT_S = 120.0
REFUSE_FAST_S = 3.0  # a prompt far over a cap is refused before any model work: well under this

GREEDY = (0.0, 0, 1.0, 0.0, 0)
NORMAL_PROMPT = "The quick brown fox"
LIMITS = {
    "real": {"INSPECTOR_MAX_PROMPT_TOKENS": "64", "INSPECTOR_MAX_STEPS": "8", "INSPECTOR_MAX_SESSIONS": "64"},
    "tiny": TINY_APP_CAPS,
    "mem": {"INSPECTOR_MAX_PROMPT_TOKENS": "4096", "INSPECTOR_MAX_STEPS": "64", "INSPECTOR_MAX_SESSIONS": "3"},
}
CLIENTS = {"real": 2, "tiny": 2, "mem": 4}

PROMPT_NAMES = ("prompt", "token", "context", "system", "chat")
MAX_NEW_NAMES = ("max new tokens", "max_new_tokens", "max-new-tokens")
FIELD_NAMES = {"temperature": ("temperature",), "top_k": ("top-k", "top_k", "top k"),
               "top_p": ("top-p", "top_p", "top p"), "min_p": ("min-p", "min_p", "min p"), "seed": ("seed",)}
FIELDS = tuple(FIELD_NAMES)


# ---------------------------------------------------------------- cases
@dataclass(frozen=True)
class Tokens:
    """A prompt of exactly `n` tokens (after the chat template when `chat`), built when the case runs."""

    n: int


@dataclass(frozen=True)
class Body:
    """Raw JSON `data` that is not a list of inputs at all."""

    value: Any


@dataclass(frozen=True)
class Case:
    id: str
    server: str  # "real" | "tiny" | "mem"
    endpoint: str = "prefill"  # "prefill" | "step" | a scenario name (SCENARIOS)
    args: tuple = ()
    expect: Expect | None = None  # None: worked out from the prompt when the case runs (prompt_expect)
    via: str = "client"  # "client": gradio_client; "raw": JSON posted to /gradio_api/call/<endpoint>
    kwargs: tuple = ()  # (name, value) keyword arguments for gradio_client
    generic_ok: bool = False  # gradio itself refuses it before the app runs; any error, even without a message
    max_s: float | None = None  # it must come back within this many seconds

    def __repr__(self) -> str:
        kw = f", kwargs={dict(self.kwargs)}" if self.kwargs else ""
        return f"{self.via} /{self.endpoint}{short(self.args, 300)}{kw}"


def sampling(rng: random.Random) -> list:
    """Valid sampling values, random but reproducible."""
    return [rng.choice((0.0, 0.7, 1.3)), rng.choice((0, 5, 50)), rng.choice((1.0, 0.9)), rng.choice((0.0, 0.05)),
            rng.randrange(1000)]


def prefill_args(prompt: Any = "Hello", chat: Any = False, system: Any = "", params: list | None = None,
                 max_new: Any = 4) -> tuple:
    return (prompt, chat, system, *(params if params is not None else GREEDY), max_new)


# Values for each sampling field; `sampling_expect` says which the API must take, refuse, or may do either.
VALUES = {
    "temperature": [0, -0.0, 0.7, 2.0, 2.0000001, 2.5, 1e308, -1e-9, -1, 1e-7, 1e-6, 1e-45, 5e-324, 1e-300, "0.5",
                    " 1 ", "abc", "", " ", "1,5", None, True, [0.5], {"t": 1}, 2**64, 10**400],
    "top_k": [0, 1, 200, 201, 49152, 10**6, 2**63, 10**400, -1, -2**63, 1.5, 2.0, "5", "five", "", None, True, [],
              1e308, -0.0],
    "top_p": [1.0, 0.5, 1e-300, 5e-324, 0, -0.0, -0.1, 1.0000001, 2, 1e308, "0.9", "p", None, False, [1], ""],
    "min_p": [0, -0.0, 0.05, 0.999999, 1, -1e-9, 1.5, "0.1", "none", None, True, {}],
    "seed": [0, 42, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, 10**400, -1, -2**63, 1.5, 3.0, 1e300,
             "7", "seed", "", None, True, [], -0.0],
}
SLIDER_MAX = {"temperature": 2.0, "top_k": 200}  # the page's sliders stop here; the engine takes more
NON_FINITE = [math.nan, math.inf, -math.inf]


def _number_expect(name: str, x: float) -> str:
    """ok / error / either for a finite number in field `name`."""
    if name == "temperature":
        return "error" if x < 0 or 0 < x < 1e-6 else "either" if x > SLIDER_MAX[name] else "ok"
    if name == "top_k":
        return "error" if x < 0 else "either" if x != int(x) or x > SLIDER_MAX[name] else "ok"
    if name == "top_p":
        return "ok" if 0 < x <= 1 else "error"
    if name == "min_p":
        return "ok" if 0 <= x < 1 else "error"
    if name == "seed":
        return "error" if x < 0 else "either" if x != int(x) else "ok"
    raise ValueError(name)


def sampling_expect(name: str, v: Any) -> str:
    """What the API must do with value `v` for sampling field `name` (or "max_new")."""
    if isinstance(v, bool):  # JSON true/false: taken as 1/0, or refused naming the field
        return "either"
    if v is None or isinstance(v, (list, dict)):
        return "error"
    if isinstance(v, str):  # a numeric string may be taken, or refused naming the field
        try:
            x = float(v.strip())
        except ValueError:
            return "error"
        return "error" if not math.isfinite(x) else "either" if _any_expect(name, x) != "error" else "error"
    if isinstance(v, float) and not math.isfinite(v):
        return "error"
    return _any_expect(name, v)


def _any_expect(name: str, x: float) -> str:
    if name != "max_new":
        return _number_expect(name, x)
    if x != int(x):  # the number box rounds (8.5 -> 8), or the server refuses it naming the field
        return "either"
    return "error" if x <= 0 or x > int(LIMITS["tiny"]["INSPECTOR_MAX_STEPS"]) else "ok"


def sampling_cases(rng: random.Random) -> list[Case]:
    cases = []
    for name in FIELDS:  # every value once, on a random endpoint
        for v in VALUES[name]:
            params = sampling(rng)
            params[FIELDS.index(name)] = v
            endpoint = rng.choice(("prefill", "step"))
            args = prefill_args("Hello", params=params) if endpoint == "prefill" else tuple(params)
            cases.append(Case("", "tiny", endpoint, args, Expect(sampling_expect(name, v), FIELD_NAMES[name])))
    for _ in range(12):  # two bad values at once: the error names either
        params = sampling(rng)
        names: tuple = ()
        kinds = []
        for name in rng.sample(FIELDS, 2):
            v = rng.choice(VALUES[name])
            params[FIELDS.index(name)] = v
            names += FIELD_NAMES[name]
            kinds.append(sampling_expect(name, v))
        kind = "error" if "error" in kinds else "either" if "either" in kinds else "ok"
        cases.append(Case("", "tiny", "step", tuple(params), Expect(kind, names)))
    return [_named(c, "sampling", i) for i, c in enumerate(cases)]


def raw_cases(rng: random.Random) -> list[Case]:
    """NaN and Infinity (JSON has no such numbers, but Python's JSON reader, the server's, takes them), and
    a wrong number of inputs: what gradio_client refuses to send, a script with plain HTTP can."""
    cases = []
    for name in FIELDS:
        for v in NON_FINITE:
            params = sampling(rng)
            params[FIELDS.index(name)] = v
            endpoint = rng.choice(("prefill", "step"))
            args = prefill_args("Hello", params=params) if endpoint == "prefill" else tuple(params)
            cases.append(Case("", "tiny", endpoint, args, Expect("error", FIELD_NAMES[name]), via="raw"))
    for v in NON_FINITE + [10**400, 2**64]:
        cases.append(Case("", "tiny", "prefill", prefill_args("Hello", max_new=v),
                          Expect(sampling_expect("max_new", v), MAX_NEW_NAMES), via="raw"))
    full = prefill_args("Hello")
    for n in (0, 1, 2, 5, 8, 10, 12):  # prefill takes 9 inputs
        cases.append(Case("", "tiny", "prefill", full[:n] + ("x",) * max(0, n - len(full)), Expect("error"),
                          via="raw", generic_ok=True))
    for n in (0, 3, 6, 9):  # step takes 5
        cases.append(Case("", "tiny", "step", (GREEDY * 2)[:n], Expect("error"), via="raw", generic_ok=True))
    for data in (Body({"prompt": "hi"}), Body("hi"), Body(None), [*full]):
        cases.append(Case("", "tiny", "prefill", (data,), Expect("error"), via="raw", generic_ok=True))
    for args in rng.sample([prefill_args(odd_text(rng), rng.choice((True, False))) for _ in range(20)], 6):
        cases.append(Case("", "tiny", "prefill", args, None, via="raw"))
    return [_named(c, "raw", i) for i, c in enumerate(cases)]


def prompt_cases(rng: random.Random) -> list[Case]:
    cases = [Case("", "tiny", "prefill", prefill_args(text, rng.choice((True, False)), params=sampling(rng)))
             for text in ODD_TEXT[::2]]  # half the odd texts; the CLI fuzz sends the other half
    cases += [Case("", "tiny", "prefill", prefill_args(odd_text(rng), rng.choice((True, False)), params=sampling(rng)))
              for _ in range(8)]
    cases += [Case("", "tiny", "prefill", prefill_args("Hi", True, odd_text(rng), params=sampling(rng)))
              for _ in range(8)]  # odd system prompts
    cases += [Case("", "real", "prefill", prefill_args(odd_text(rng), chat, max_new=1))
              for chat in (True, False, False, False, False)]  # the real tokenizer and chat template
    for prompt in (None, 5, ["a"], {"x": 1}):  # not text at all
        cases.append(Case("", "tiny", "prefill", prefill_args(prompt), Expect("either", PROMPT_NAMES)))
    for chat in ("yes", "false", 1, None, [], {}):
        cases.append(Case("", "tiny", "prefill", prefill_args("Hello", chat), Expect("either", ("chat",))))
    for system in (None, 7, ["s"]):
        cases.append(Case("", "tiny", "prefill", prefill_args("Hello", True, system), Expect("either", ("system",))))
    return [_named(c, "prompt", i) for i, c in enumerate(cases)]


def max_new_cases(rng: random.Random) -> list[Case]:
    cap = int(LIMITS["tiny"]["INSPECTOR_MAX_STEPS"])
    values = [1, cap - 1, cap, cap + 1, 0, -1, 1.5, 2.0, cap + 0.5, "3", "x", "", None, True, [], 10**12, 2**63,
              10**400, 1e308, -1e308]
    cases = [Case("", "tiny", "prefill", prefill_args("Hello", params=sampling(rng), max_new=v),
                  Expect(sampling_expect("max_new", v), MAX_NEW_NAMES)) for v in values]
    return [_named(c, "maxnew", i) for i, c in enumerate(cases)]


def arity_cases() -> list[Case]:
    """gradio_client checks names and required arguments itself (a one-line TypeError); a missing argument
    with a default takes the page's default (max new tokens 32: over this server's cap of 8)."""
    full = prefill_args("Hello")
    some = Expect("either", ("argument",) + MAX_NEW_NAMES)
    cases = [Case("", "tiny", "prefill", full[:n], Expect("error", ("argument", "prompt", "system")))
             for n in (0, 1, 2)]
    cases += [Case("", "tiny", "prefill", full[:n], some) for n in (3, 6, 9)]
    cases += [Case("", "tiny", "prefill", full + ("extra",), some),
              Case("", "tiny", "prefill", (), some, kwargs=(("prompt", "Hi"), ("system", ""))),
              Case("", "tiny", "prefill", (), Expect("error", ("bogus",)),
                   kwargs=(("prompt", "Hi"), ("system", ""), ("bogus", 1))),
              Case("", "tiny", "prefill", ("Hi",), Expect("error", ("prompt",)), kwargs=(("prompt", "Hi"),)),
              Case("", "tiny", "step", (), Expect("either", ("argument",))),
              Case("", "tiny", "step", GREEDY + (1,), Expect("either", ("argument",)))]
    return [_named(c, "arity", i) for i, c in enumerate(cases)]


def cap_cases() -> list[Case]:
    """Prompts just under and over the prompt cap (real) and the context window (tiny), steps up to and past
    max new tokens, generation past the context end; then the memory and session caps (mem)."""
    err = Expect("error", PROMPT_NAMES)
    cases = [Case("", "real", "prefill", prefill_args(Tokens(n), max_new=1), Expect(k, PROMPT_NAMES))
             for n, k in ((64, "ok"), (65, "error"))]
    cases += [Case("", "real", "prefill", prefill_args(Tokens(n), True, max_new=1), Expect(k, PROMPT_NAMES))
              for n, k in ((64, "ok"), (65, "error"))]  # counted after the chat template
    cases += [Case("", "real", "prefill", prefill_args("Hi", True, UNIT * 80, max_new=1), err),  # a long system prompt
              Case("", "real", "prefill", prefill_args(Tokens(1000), max_new=1), err, max_s=REFUSE_FAST_S),
              Case("", "real", "prefill", prefill_args("x" * 200_000, max_new=1), err, max_s=REFUSE_FAST_S),
              Case("", "tiny", "steps_past_max", (), Expect("error", MAX_NEW_NAMES + ("finished",)))]
    cases += [Case("", "tiny", "prefill", prefill_args(Tokens(n), max_new=8), Expect(k, PROMPT_NAMES))
              for n, k in ((254, "ok"), (255, "ok"), (256, "error"), (257, "error"), (400, "error"))]
    cases += [Case("", "tiny", "prefill", prefill_args(Tokens(n), True, max_new=8), Expect(k, PROMPT_NAMES))
              for n, k in ((255, "ok"), (256, "error"))]
    cases += [Case("", "tiny", "past_context", (), Expect("error", ("finished", "context", "max new tokens"))),
              Case("", "tiny", "step_before_prefill", (), Expect("error", ("prefill",))),
              Case("", "mem", "mem_prompt", (), Expect("error", ("memory", "MB", "MAX_TRACE"))),
              Case("", "mem", "mem_steps", (), Expect("error", ("memory", "MB", "MAX_TRACE"))),
              Case("", "mem", "sessions", (), Expect("either", ("session", "busy", "expired")))]
    return [_named(c, "cap", i) for i, c in enumerate(cases)]


def _named(case: Case, prefix: str, i: int) -> Case:
    # gradio_client cannot send a lone surrogate (httpx encodes the body as UTF-8): those go as escaped JSON
    surrogate = any(isinstance(a, str) and any("\ud800" <= c <= "\udfff" for c in a) for a in case.args)
    return Case(f"{prefix}-{i:03d}", case.server, case.endpoint, case.args, case.expect,
                "raw" if surrogate else case.via, case.kwargs, case.generic_ok, case.max_s)


def all_cases() -> list[Case]:
    rng = random.Random(SEED)  # one stream, consumed in a fixed order: the same seed, the same cases
    cases = prompt_cases(rng) + sampling_cases(rng) + max_new_cases(rng) + raw_cases(rng) + arity_cases() + cap_cases()
    assert len({c.id for c in cases}) == len(cases)
    return cases


# ---------------------------------------------------------------- servers
@dataclass
class Server:
    """One app served in this process, its clients, and the main client's last known state."""

    name: str
    demo: Any
    loaded: Any
    clients: list
    extra: dict = field(default_factory=dict)
    state: dict | None = None  # the main client's last summary (None: unknown, e.g. after a refused prefill)
    done: int = 0
    reference: Any = None
    in_place: bool = False  # True: an app shared with other tests, whose caps are put in place for each call

    def caps(self) -> AbstractContextManager:
        """The server's caps in force while the block runs (on a shared app, put in place; else built in)."""
        return caps_in_place(self.demo, self.limits) if self.in_place else nullcontext()

    @property
    def url(self) -> str:
        return self.demo.local_url

    @property
    def limits(self) -> dict:
        return {**LIMITS[self.name], **self.extra.get("env", {})}

    def predict(self, endpoint: str, args: tuple, client: Any = None, kwargs: tuple = ()) -> tuple[str, Any, float]:
        """("ok", result) or ("error", message), and the seconds it took."""
        client = client or self.clients[0]
        t0 = time.perf_counter()
        try:
            out = client.submit(*args, api_name=f"/{endpoint}", **dict(kwargs)).result(timeout=CALL_TIMEOUT_S)
            return "ok", out, time.perf_counter() - t0
        except Exception as exc:  # gradio_client's AppError carries the server's message; others are client-side
            return "error", str(exc), time.perf_counter() - t0

    def raw(self, endpoint: str, data: Any) -> tuple[str, Any, float]:
        """Post `{"data": data}` (NaN/Infinity allowed) to /gradio_api/call/<endpoint> and read the event."""
        t0 = time.perf_counter()
        body = json.dumps({"data": data}, allow_nan=True)
        r = httpx.post(f"{self.url}gradio_api/call/{endpoint}", content=body,
                       headers={"content-type": "application/json"}, timeout=CALL_TIMEOUT_S,
                       verify=tls_verify(self.url))
        if r.status_code != 200:
            try:
                detail = r.json().get("detail")
                message = "; ".join(d.get("msg", "") for d in detail) if isinstance(detail, list) else str(detail)
            except ValueError:
                message = r.text
            return "error", message, time.perf_counter() - t0
        r = httpx.get(f"{self.url}gradio_api/call/{endpoint}/{r.json()['event_id']}", timeout=CALL_TIMEOUT_S,
                      verify=tls_verify(self.url))
        event, payload = None, None
        for line in r.text.splitlines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                payload = json.loads(line.split(":", 1)[1])
        elapsed = time.perf_counter() - t0
        if event == "complete":
            return "ok", payload[-1] if isinstance(payload, list) else payload, elapsed
        message = payload.get("error") if isinstance(payload, dict) else payload
        return "error", message, elapsed

    def prefill(self, prompt: str, max_new: int = 8, client: Any = None, chat: bool = False) -> tuple[str, Any, float]:
        result = self.predict("prefill", prefill_args(prompt, chat, max_new=max_new), client)
        if client is None:
            self.state = result[1] if result[0] == "ok" else None
        return result

    def normal(self) -> tuple:
        """The normal request: a greedy prefill and one step; the tokens, or what went wrong."""
        outcome, out, _ = self.prefill(NORMAL_PROMPT, max_new=4)
        if outcome != "ok":
            return ("prefill failed", out)
        first = list(out["generated_ids"])
        outcome, out, _ = self.predict("step", GREEDY)
        self.state = out if outcome == "ok" else None
        return (first, list(out["generated_ids"]) if outcome == "ok" else out)

    def health_problems(self) -> list[str]:
        thread = getattr(getattr(self.demo, "server", None), "thread", None)
        problems = [] if thread is None or thread.is_alive() else ["the server thread is gone"]
        now = self.normal()
        if now != self.reference:
            problems.append(f"a normal request now gives {short(now)}, before the fuzz {short(self.reference)}")
        return problems

    def ensure_steppable(self) -> None:
        """The main client's session has a prefill with steps left (cheap: only the tiny server steps often)."""
        s = self.state
        if s is None or s.get("finished") or len(s.get("generated_ids", [])) >= 8:
            self.prefill("Once upon a time", max_new=8)

    def tokens(self, n: int, chat: bool) -> str:
        """A prompt of exactly n tokens (after the chat template when `chat`)."""
        tok = self.loaded.tokenizer
        base = len(tok.encode(tok.render_chat("", system=None))) if chat else 0
        text = UNIT * (n - base) if n > base else "x"
        got = len(tok.encode(tok.render_chat(text) if chat else text))
        assert got == n, f"could not build a {n}-token prompt (got {got})"
        return text


def serve(name: str, demo: Any, loaded: Any, env: dict[str, str], in_place: bool = False) -> Server:
    """The fuzz's view of an app: its clients, and the normal request's tokens before any case (under the
    server's caps: `Server.caps`)."""
    clients = [api_client(demo.local_url) for _ in range(CLIENTS[name])]
    srv = Server(name, demo, loaded, clients, extra={"env": env}, in_place=in_place)
    with srv.caps():
        srv.reference = srv.normal()
    assert isinstance(srv.reference[0], list), f"{name}: the normal request fails before any fuzz: {srv.reference}"
    return srv


def memory_cap_mb(loaded: Any, labs_share_mb: int = 0) -> tuple[int, int]:
    """A memory cap 1-2 MB above what a one-token prompt holds (a few decode steps) in a session's share (the
    cap less `labs_share_mb`, the session's share of the labs' shared models: admission takes it off), and
    a prompt length over the whole cap."""
    from inspector.engine.config import SamplingParams
    from inspector.ui.visitors import new_ui_session

    s = new_ui_session(loaded)
    s.prefill("Hello", SamplingParams(), max_new_tokens=8)
    cap_mb = s.retained_nbytes // 2**20 + 2 + labs_share_mb
    for n in (64, 256, 1024):
        s = new_ui_session(loaded)
        s.prefill_ids([loaded.tokenizer.encode(UNIT)[0]] * n, SamplingParams(), max_new_tokens=8)
        if s.retained_nbytes >= cap_mb * 2**20 + 2**19:
            return cap_mb, n
    pytest.fail(f"no prompt of up to 1024 tokens passes a memory cap of {cap_mb} MB")


def serve_mem(demo: Any, loaded: Any) -> Server:
    """"mem" on the default app `demo`, its caps put in place for each call: 3 sessions, a memory cap just
    above a one-token prompt's."""
    from inspector.ui.admission import process_nbytes

    sessions = int(LIMITS["mem"]["INSPECTOR_MAX_SESSIONS"])
    labs_share_mb = -(-process_nbytes(demo.store) // (sessions * 2**20))  # 0 unless a lab built a shared model
    cap_mb, n_over = memory_cap_mb(loaded, labs_share_mb)
    srv = serve("mem", demo, loaded, {**LIMITS["mem"], "INSPECTOR_MAX_TRACE_MB": str(cap_mb)}, in_place=True)
    srv.extra["n_over"] = n_over
    return srv


# ---------------------------------------------------------------- what a case must end in
def prompt_expect(srv: Server, prompt: Any, chat: Any, system: Any) -> Expect:
    """Blank prompts are refused, prompts past the prompt cap or the context window are refused, the rest
    is text the model reads (a server may refuse control characters, naming them)."""
    if not prompt.strip():
        return Expect("error" if set(prompt) <= set(" \t\n\r") else "either", PROMPT_NAMES)
    tok = srv.loaded.tokenizer
    system_used = (system or None) if chat else None  # the API's rule: an empty system prompt means the default
    n = len(tok.encode(tok.render_chat(prompt, system=system_used) if chat else prompt))
    cap = min(int(srv.limits["INSPECTOR_MAX_PROMPT_TOKENS"]), srv.loaded.config.max_position_embeddings - 1)
    if n > cap:
        return Expect("error", PROMPT_NAMES)
    return Expect("either" if has_controls(prompt + (system_used or "")) else "ok", PROMPT_NAMES)


def resolve(srv: Server, case: Case) -> tuple[tuple, Expect]:
    """The case's arguments (Tokens placeholders built now) and what it must end in."""
    args = list(case.args)
    if case.endpoint == "prefill" and args and isinstance(args[0], Tokens):
        args[0] = srv.tokens(args[0].n, chat=bool(args[1]))
    expect = case.expect
    if expect is None:
        expect = prompt_expect(srv, *args[:3])
    return tuple(args), expect


def problems_with(case: Case, expect: Expect, outcome: str, value: Any, elapsed: float) -> list[str]:
    problems = []
    if outcome == "ok":
        if expect.kind == "error":
            problems.append("accepted, but it must be refused")
        if case.endpoint in ("prefill", "step") and not (isinstance(value, dict) and "generated_ids" in value
                                                         and "phase" in value):
            problems.append("the result is not the summary dict")
    else:
        if expect.kind == "ok":
            problems.append("refused, but it must be taken")
        if not (case.generic_ok and (value is None or isinstance(value, str))):
            problems += error_problems(value, expect.names)
        elif isinstance(value, str) and len(value.strip().splitlines()) > 1:
            problems.append("the error is more than one line")
    if case.max_s is not None and elapsed > case.max_s:
        problems.append(f"took {elapsed:.1f} s (every cap is checked before model work: at most {case.max_s} s)")
    return problems


# ---------------------------------------------------------------- scenarios (several calls, one case)
def steps_past_max(srv: Server, case: Case) -> tuple[str, Any, float]:
    """Prefill with max new tokens = the cap, step until it is used up: the step after is refused."""
    cap = int(srv.limits["INSPECTOR_MAX_STEPS"])
    outcome, out, _ = srv.prefill("Count: one, two, three, four, five, six, seven, eight, nine", max_new=cap)
    assert outcome == "ok", f"prefill failed: {out}"
    while outcome == "ok" and not out["finished"]:
        outcome, out, elapsed = srv.predict("step", GREEDY)
    assert outcome == "ok" and len(out["generated_ids"]) <= cap, f"{outcome} {short(out)}"
    result = srv.predict("step", GREEDY)
    srv.state = None
    return result


def past_context(srv: Server, case: Case) -> tuple[str, Any, float]:
    """A prompt one token short of the context window: one token, finished; the next step is refused."""
    n = srv.loaded.config.max_position_embeddings - 1
    outcome, out, _ = srv.prefill(srv.tokens(n, chat=False), max_new=8)
    assert outcome == "ok" and out["finished"], f"{outcome} {short(out)}"
    result = srv.predict("step", GREEDY)
    srv.state = None
    return result


def step_before_prefill(srv: Server, case: Case) -> tuple[str, Any, float]:
    return srv.predict("step", GREEDY, client=srv.clients[1])  # this client never prefilled


def mem_prompt(srv: Server, case: Case) -> tuple[str, Any, float]:
    """A one-token prompt fits the memory cap; a prompt whose KV cache and trace pass it is refused."""
    outcome, out, _ = srv.prefill("Hello", max_new=8)
    assert outcome == "ok", f"a one-token prompt must fit the memory cap: {out}"
    return srv.prefill(srv.tokens(srv.extra["n_over"], chat=False), max_new=8)


def mem_steps(srv: Server, case: Case) -> tuple[str, Any, float]:
    """Steps fill the memory cap: one of them is refused, naming it, before max new tokens runs out."""
    outcome, out, elapsed = srv.prefill("Hello", max_new=64)
    assert outcome == "ok", f"prefill failed: {out}"
    while outcome == "ok" and not out["finished"]:
        outcome, out, elapsed = srv.predict("step", GREEDY)
    assert outcome == "error", f"64 steps never reached the memory cap: {short(out)}"
    return outcome, out, elapsed


def sessions(srv: Server, case: Case) -> tuple[str, Any, float]:
    """Fill the 3 sessions; a 4th visitor is served (an idle one evicted) or told the server is busy; the
    first visitor then steps, or is told its session expired."""
    for client in srv.clients[:3]:
        outcome, out, _ = srv.prefill("Hello", max_new=8, client=client)
        assert outcome == "ok", f"a session under the cap must be served: {out}"
    fourth = srv.prefill("Hello", max_new=8, client=srv.clients[3])
    problems = problems_with(case, case.expect, *fourth)
    assert not problems, f"the visitor over the session cap: {fourth[0]} {short(fourth[1])}: {problems}"
    return srv.predict("step", GREEDY, client=srv.clients[0])


SCENARIOS = {f.__name__: f for f in (steps_past_max, past_context, step_before_prefill, mem_prompt, mem_steps,
                                     sessions)}


# ---------------------------------------------------------------- one case
def run_case(srv: Server, case: Case) -> None:
    """Run `case` on `srv` under its caps; fails the test with the case's inputs and every problem found."""
    with srv.caps():
        outcome, value, elapsed, expect, problems = _run(srv, case)
    assert not problems, (f"{case.id} (seed {SEED}, {srv.name} server): {case!r} -> {outcome}: {short(value, 300)}; "
                          f"expected {expect.kind}: " + "; ".join(problems))


def _run(srv: Server, case: Case) -> tuple[str, Any, float, Expect, list[str]]:
    args, expect = resolve(srv, case)
    if case.endpoint in SCENARIOS:
        outcome, value, elapsed = SCENARIOS[case.endpoint](srv, case)
    else:
        if case.endpoint == "step" and case.via == "client":
            srv.ensure_steppable()
        if case.via == "raw":
            data = args[0].value if args and isinstance(args[0], Body) else list(args)
            outcome, value, elapsed = srv.raw(case.endpoint, data)
        else:
            outcome, value, elapsed = srv.predict(case.endpoint, args, kwargs=case.kwargs)
        if case.endpoint == "prefill" and case.via == "client" and not case.kwargs:
            srv.state = value if outcome == "ok" else None
        elif case.endpoint == "step" and outcome == "ok":
            srv.state = value
    problems = problems_with(case, expect, outcome, value, elapsed)
    srv.done += 1
    if srv.done % HEALTH_EVERY == 0:
        problems += srv.health_problems()
    return outcome, value, elapsed, expect, problems


def health_after_fuzz(servers: dict[str, Server]) -> dict[str, list[str]]:
    """Every server's problems now (each under its caps): the normal request must give the tokens it gave
    before the fuzz."""
    problems = {}
    for name, srv in servers.items():
        with srv.caps():
            problems[name] = srv.health_problems()
    return problems


