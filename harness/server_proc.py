"""The app as a real `python app.py` subprocess, its memory sampled from outside, and sessions driven
through gradio_client the way a browser (the page's own events) or a script (the named API) does.

Used by the tests (tests/support/ui_server.py counts each `Server` start: the Space bundle's app of
tests/support/space_app.py, which tests/served/test_space_e2e.py and test_load.py share), bench/load.py, bench/load_labs.py and bench/soak.py (`from harness.server_proc import ...`; they run from
the repository root); no pytest here.

- `Server`: `python app.py` on 127.0.0.1:<free port> with the offline environment, any Python (`python=`,
  e.g. another torch in a venv), from this checkout or another tree (`app_dir=`, e.g. `git archive HEAD`
  unpacked, to measure a commit while the checkout is being edited: the server imports `inspector` from
  the directory of its app.py). With `inherit_env=False` its environment is `env` alone plus the address
  (a Space bundle's app, started as Spaces does: tests/support/space_app.py). `rss()` is the process's
  resident memory plus its children's.
- `RssSampler`: a thread that samples `Server.rss()` every `interval_s`; keeps the peak and every sample,
  and terminates the server when it passes `kill_above` bytes (the machine is shared: a runaway server
  must not take it down).
- `UiSession` drives `/ui_prefill`, `/ui_step`, `/ui_play`, `/ui_pause`: the page's events, undocumented
  but what a browser triggers, and the only ones that run the next forward ahead
  (`inspector.ui.handlers.Handlers.queue_forward_ahead`). `ApiSession` drives the named API `/prefill`,
  `/step`. Both return a `Reply` and never raise on an app error: it is `Reply.error`. `open_session` connects
  one (and warms the server up when asked); `run_sequential` / `run_parallel` time sessions' Steps.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from typing import Any
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.net import NotServing, api_client, free_port, stream_closed, wait_for_http, wait_until

ROOT = Path(__file__).resolve().parents[1]
GREEDY = (0.0, 0, 1.0, 0.0, 0)  # temperature, top_k, top_p, min_p, seed
LAYER_HEAD = (0, 0)  # the attention tab's sliders as a fresh page has them
UNPINNED = (False, -1)  # the "pin" box and the selected-position box as a fresh page has them
PLAY_MAX = (20, True)  # Play's Speed box and its "max" tick: as fast as the model goes
CALL_TIMEOUT_S = 300.0  # one request; a wedged server fails the session instead of hanging the run

# Short chat prompts, one per session (a 17th session reuses the list with a suffix: `prompt_for`).
PROMPTS = [
    "What is gravity?", "Write a haiku about the sea.", "Name three primary colors.",
    "Why is the sky blue?", "Give me a tip for learning to cook.", "What does a compiler do?",
    "Describe a cat in one sentence.", "How do plants make food?", "What is the capital of Italy?",
    "Suggest a name for a pet turtle.", "Explain what a prime number is.", "What is rain made of?",
    "Tell me a fun fact about octopuses.", "How far away is the Moon?", "What is a good breakfast?",
    "Why do we sleep?",
]


def prompt_for(i: int) -> str:
    """Session i's prompt: different for every session."""
    base = PROMPTS[i % len(PROMPTS)]
    return base if i < len(PROMPTS) else f"{base} (question {i + 1})"


def torch_version(python: str) -> str:
    """The torch version that `python` imports (the server's, which may differ from this process's)."""
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=120)
    return out.stdout.strip() or f"unknown ({out.stderr.strip().splitlines()[-1:]})"


class Server:
    """`python app.py` on a free port of 127.0.0.1: `start()` and `close()`, or `with Server() as server:`."""

    def __init__(self, python: str = sys.executable, env: dict[str, str] | None = None,
                 app_dir: Path | str = ROOT, ready_timeout_s: float = 240.0, inherit_env: bool = True) -> None:
        self.python = python
        self.inherit_env = inherit_env
        self.app_dir = Path(app_dir).resolve()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.extra_env = dict(env or {})
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", prefix="inspector-server-", suffix=".log", delete=False)
        self.killed_for: str | None = None  # set by RssSampler when it stops a runaway server

    def start(self) -> "Server":
        """Start the server and wait until it answers (RuntimeError, with its log, if it exits or hangs)."""
        address = {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(self.port)}
        if self.inherit_env:
            env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
                   "HF_HUB_DISABLE_TELEMETRY": "1", **address, **self.extra_env}
            env.pop("SYSTEM", None)  # SYSTEM=spaces would start Spaces' reloader (UI_NOTES)
        else:
            env = {**self.extra_env, **address}
        self.proc = subprocess.Popen([self.python, "app.py"], cwd=self.app_dir, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def close(self, keep_log: bool = False) -> None:
        """Stop the server; its log is kept (path in `self.log.name`) when asked or when the guard stopped it."""
        self.stop()
        if not keep_log and self.killed_for is None:
            Path(self.log.name).unlink(missing_ok=True)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(keep_log=exc_type is not None)

    def _wait_ready(self) -> None:
        try:
            wait_for_http(self.url + "gradio_api/info", self.proc, self.ready_timeout_s)
        except NotServing as exc:
            raise RuntimeError(f"{exc}:\n{self.log_tail()}") from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss(self) -> int:
        """Resident bytes of the server process and all its children (0 once it has exited)."""
        try:
            p = psutil.Process(self.proc.pid)
            procs = [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for q in procs:
            try:
                total += q.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        """Terminate the server (and any children it started), then kill what is left after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for c in children:
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass

    def log_tail(self, n: int = 30) -> str:
        self.log.flush()
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-n:])


class RssSampler:
    """Samples a server's RSS every `interval_s` on a thread, between `start()` and `stop()` (or `with`)."""

    def __init__(self, server: Server, interval_s: float = 0.1, kill_above: int | None = None) -> None:
        self.server = server
        self.interval_s = interval_s
        self.kill_above = kill_above
        self.samples: list[tuple[float, int]] = []  # (monotonic seconds, bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> "RssSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        return max((b for _, b in self.samples), default=0)

    def _run(self) -> None:
        while True:
            rss = self.server.rss()
            self.samples.append((time.monotonic(), rss))
            if self.kill_above is not None and rss > self.kill_above and self.server.alive():
                self.server.killed_for = f"RSS {rss / 2**30:.1f} GiB passed the {self.kill_above / 2**30:.1f} GiB guard"
                self.server.stop()
            if self._stop.wait(self.interval_s):
                return


@dataclass
class Reply:
    """What one request left the session with: its tokens so far, phase, and the error if it failed."""

    generated_ids: list[int] = field(default_factory=list)
    n_prompt: int = 0
    phase: str = ""
    message: str = ""  # a note on the status line (e.g. why Play stopped), not an error
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase.startswith("finished")


def _client(url: str):
    import httpx

    # httpx's default 5 s is too short for the config request to a server busy with 16 sessions on 2 cores
    return api_client(url, analytics_enabled=False, httpx_kwargs={"timeout": httpx.Timeout(120.0)})


def _call(client, *args, api_name: str, timeout_s: float = CALL_TIMEOUT_S):
    """One event's result; then, unless another event of the client is pending, until the client has read the end
    of its stream of answers (`stream_closed`), so that the session's next event does not join a stream that is
    ending."""
    result = client.submit(*args, api_name=api_name).result(timeout=timeout_s)
    stream_closed(client)
    return result


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


_ATTR = r'{}="([^"]*)"'
_MESSAGE = re.compile(r'<span id="status-message" class="(ii-error|ii-note)">(.*?)</span>', re.S)


def parse_bundle(value: str) -> Reply:
    """A `ViewBundle` value (JSON {view key: value}) -> Reply: tokens from the chips' `data-id`s, phase and
    message (error or note) from the status line. Views an update skipped are absent from the bundle."""
    views = json.loads(value) if value else {}
    reply = Reply()
    status = views.get("status") or ""
    m = re.search(_ATTR.format("data-phase"), status)
    reply.phase = m.group(1) if m else ""
    m = _MESSAGE.search(status)
    if m:
        text = re.sub(r"<[^>]+>", "", m.group(2))
        if m.group(1) == "ii-error":
            reply.error = text
        else:
            reply.message = text
    chips = views.get("chips")
    if chips:
        m = re.search(_ATTR.format("data-prompt"), chips)
        reply.n_prompt = int(m.group(1)) if m else 0
        ids = [int(x) for x in re.findall(_ATTR.format("data-id"), chips)]
        reply.generated_ids = ids[reply.n_prompt:]
    return reply


class UiSession:
    """One browser-like session: the page's own events (`/ui_prefill`, `/ui_step`, `/ui_play`), greedy.
    The session id lives in the server-side State of this client's session, as for a browser tab."""

    mode = "ui"

    def __init__(self, url: str) -> None:
        self.client = _client(url)
        self._last = Reply()

    def _bundle(self, value: str) -> Reply:
        reply = parse_bundle(value)
        if not reply.generated_ids and self._last.generated_ids and reply.error:
            reply.generated_ids, reply.n_prompt = self._last.generated_ids, self._last.n_prompt  # chips skipped
        self._last = reply
        return reply

    def prefill(self, prompt: str, max_new: int, chat: bool = True, system: str = "") -> Reply:
        try:
            return self._bundle(_call(self.client, prompt, chat, system, *GREEDY, max_new, *LAYER_HEAD,
                                      *UNPINNED, api_name="/ui_prefill"))
        except Exception as exc:  # noqa: BLE001 - transport errors (server gone, timeout) end the session
            return Reply(error=_one_line(exc))

    def step(self) -> Reply:
        try:
            return self._bundle(_call(self.client, *GREEDY, *LAYER_HEAD, api_name="/ui_step"))
        except Exception as exc:  # noqa: BLE001
            return Reply(error=_one_line(exc))

    def play(self, deadline: float | None = None, timeout_s: float = 3 * CALL_TIMEOUT_S) -> Reply:
        """Press Play and wait until it stops by itself (its last update); at `deadline` (monotonic), press
        Pause. A Play still running `timeout_s` later is an error."""
        try:
            job = self.client.submit(*GREEDY, *LAYER_HEAD, *PLAY_MAX, api_name="/ui_play")
            if deadline is not None and not wait_until(job.done, deadline - time.monotonic(), interval_s=0.2):
                _call(self.client, api_name="/ui_pause")
            return self._bundle(job.result(timeout=timeout_s))
        except Exception as exc:  # noqa: BLE001
            return Reply(error=_one_line(exc))

    def close(self) -> None:
        self.client.close()


class ApiSession:
    """One script session: the named API `/prefill` and `/step` (no forward run ahead), greedy."""

    mode = "api"

    def __init__(self, url: str) -> None:
        self.client = _client(url)

    @staticmethod
    def _summary(out: dict) -> Reply:
        return Reply(generated_ids=list(out["generated_ids"]), n_prompt=len(out["prompt_ids"]), phase=out["phase"])

    def prefill(self, prompt: str, max_new: int, chat: bool = True, system: str = "") -> Reply:
        try:
            return self._summary(_call(self.client, prompt, chat, system, *GREEDY, max_new, api_name="/prefill"))
        except Exception as exc:  # noqa: BLE001 - gr.Error arrives as AppError with the one-line message
            return Reply(error=_one_line(exc))

    def step(self) -> Reply:
        try:
            return self._summary(_call(self.client, *GREEDY, api_name="/step"))
        except Exception as exc:  # noqa: BLE001
            return Reply(error=_one_line(exc))

    def close(self) -> None:
        self.client.close()


SESSION_KINDS = {"ui": UiSession, "api": ApiSession}


@dataclass
class SessionRun:
    """One session's prefill + steps: its tokens, each request's latency and the first error."""

    prompt: str
    generated_ids: list[int] = field(default_factory=list)
    prefill_ms: float | None = None
    step_ms: list[float] = field(default_factory=list)
    error: str | None = None
    finished_early: str = ""  # the phase, when generation ended (EOS) before all steps ran


def run_session(session: UiSession | ApiSession, prompt: str, steps: int, max_new: int | None = None,
                start: threading.Barrier | None = None) -> SessionRun:
    """Prefill `prompt` (chat template, greedy) then `steps` Steps; stops at the first error or at EOS.
    `start`: a barrier every session waits on first, so they all begin together."""
    run = SessionRun(prompt)
    if start is not None:
        start.wait()
    t0 = time.perf_counter()
    reply = session.prefill(prompt, max_new if max_new is not None else steps + 1)
    run.prefill_ms = (time.perf_counter() - t0) * 1e3
    for i in range(steps + 1):
        run.generated_ids = reply.generated_ids or run.generated_ids
        if reply.error:
            run.error = reply.error
            return run
        if reply.finished:
            run.finished_early = reply.phase if i < steps else ""
            return run
        if i == steps:
            return run
        t0 = time.perf_counter()
        reply = session.step()
        run.step_ms.append((time.perf_counter() - t0) * 1e3)
    return run


def open_session(kind, url: str, prompt: str, warmup: bool = False):
    """A session of `kind` connected to `url`; with `warmup` it prefills `prompt` and steps once first, untimed
    (the server's first forwards and views are slow: cold caches, lazy imports). Raises what connecting raised."""
    session = kind(url)
    if warmup:
        session.prefill(prompt, 3)
        session.step()
    return session


def _open_and_run(kind, url: str, prompt: str, steps: int, max_new: int | None,
                  start: threading.Barrier | None, warmup: bool = False) -> SessionRun:
    try:
        session = open_session(kind, url, prompt, warmup)
    except Exception as exc:  # noqa: BLE001 - could not even connect
        if start is not None:
            start.wait()
        return SessionRun(prompt, error=_one_line(exc))
    try:
        return run_session(session, prompt, steps, max_new, start)
    finally:
        session.close()


def run_sequential(url: str, mode: str, prompts: list[str], steps: int, max_new: int | None = None) -> list[SessionRun]:
    """One session per prompt, each alone (a fresh client each, one after another): the solo runs."""
    return [_open_and_run(SESSION_KINDS[mode], url, p, steps, max_new, None) for p in prompts]


def run_parallel(url: str, mode: str, prompts: list[str], steps: int, max_new: int | None = None,
                 warmup: bool = False) -> tuple[list[SessionRun], float]:
    """One session per prompt, all at once (one thread each; clients connect first, then a barrier);
    returns the runs and the wall seconds from the barrier to the last session's end. `warmup`: the
    first session prefills and steps once before the barrier (its run is then replaced by its own
    prefill: no extra session on the server)."""
    kind = SESSION_KINDS[mode]
    runs: list = [None] * len(prompts)
    start = threading.Barrier(len(prompts) + 1, timeout=CALL_TIMEOUT_S)

    def worker(i: int) -> None:
        try:
            runs[i] = _open_and_run(kind, url, prompts[i], steps, max_new, start, warmup and i == 0)
        except threading.BrokenBarrierError:  # another client did not connect within CALL_TIMEOUT_S
            runs[i] = SessionRun(prompts[i], error="gave up waiting for the other sessions to connect")

    t0 = run_at_barrier(worker, len(prompts), start)
    return runs, time.perf_counter() - t0


def run_at_barrier(worker: Any, n: int, start: threading.Barrier) -> float:
    """Run worker(0..n-1) on threads that meet at `start` (this thread is its last party) and wait for them
    all; returns the `time.perf_counter()` of the moment they were released."""
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass  # the workers record it
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return t0
