"""Where the web app's model work runs: two dedicated threads, each with a torch thread count fixed once (one
thread when decode uses every torch thread: see `_executor`). The app loads its model on the prefill thread too.

PyTorch's CPU kernels run on an OpenMP thread team that belongs to the calling thread. Gradio calls
handlers from a pool of worker threads, so model calls made straight from handlers would create one team
per worker thread, and idle teams spin against the busy one (a decode step about 2x slower). So tensors
are only touched on two threads of ours:
- the **decode thread** (`call`, `submit`, `on_model_thread`): decode steps, forwards run ahead, the views'
  on-demand tensors (attention rows, logit lens), sampling; `decode_threads()` intra-op threads, one fewer
  than torch has (at least 1; `INSPECTOR_DECODE_THREADS` overrides). A decode step is hundreds of small
  memory-bound ops, each a parallel region whose threads wait for the slowest; on 2 cores, anything else
  that runs meanwhile (the page drawing when the browser is local, Gradio encoding a response, another
  visitor's request) stalls every region of a 2-thread decode.
- the **prefill thread** (`call_prefill`, `on_prefill_thread`): prefills and full recomputes, large
  matmuls that use every thread torch has.
One lock lets only one of them run at a time, so they never compete for the cores, and work keeps the
order in which each thread received it.

Each thread sets its count once, when it starts, and nothing changes it afterwards: `torch.set_num_threads`
is not a cheap setter. Every call resizes the calling thread's OpenMP team, sets MKL's thread-local count,
recreates torch's pthreadpool and clears oneDNN's cached primitives (which bf16 matmuls use), work that
switching one thread between prefill and decode counts would repeat on every model call.

`submit()` queues work on the decode thread without waiting, `submit_after()` does so after a delay (and
`settle()` waits for both): the handlers run each next decode forward ahead this way (`Session.forward_ahead`)
once a step's views are built, unless `INSPECTOR_RUN_AHEAD=0` (`inspector.ui.app_model.run_ahead_enabled()`).
Queued on the same thread, it finishes before a later Step's own call; a Step that comes before it was queued
runs its own.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import wraps
from typing import Any, Callable, TypeVar

import torch

from inspector.ui.app_model import positive_int_env

T = TypeVar("T")

THREAD_NAME = "inspector-model"  # both model threads' names start with it
ALL_THREADS = torch.get_num_threads()  # read at import, on the importing thread, before any thread pins its count
_TORCH = threading.Lock()  # one model thread runs torch at a time
_executors: dict[int, ThreadPoolExecutor] = {}  # by thread count
_executors_lock = threading.Lock()


def decode_threads() -> int:
    """Intra-op threads of the decode thread: `INSPECTOR_DECODE_THREADS`, else torch's count less one (>= 1)."""
    n = positive_int_env("INSPECTOR_DECODE_THREADS")
    return n if n is not None else max(1, ALL_THREADS - 1)


def _pin_thread_count(n: int) -> Callable[[], None]:
    def initializer() -> None:
        torch.get_num_threads()  # torch's lazy per-thread init first, or it would reset the count on first use
        torch.set_num_threads(n)
    return initializer


def _executor(kind: str) -> ThreadPoolExecutor:
    """The decode or prefill thread's executor, made on first use (no thread starts at import). Keyed by its
    thread count alone: a changed INSPECTOR_DECODE_THREADS gets a new thread rather than re-pinning one, and
    when decode uses every torch thread (INSPECTOR_DECODE_THREADS = torch's count) decode and prefill share one
    thread. Two teams of every thread would outnumber the cores, and then libgomp throttles how long an idle
    team thread spins (GOMP_SPINCOUNT's oversubscribed default), so each of a decode step's parallel regions
    wakes a sleeping thread: 2-thread decode at 20 tok/s instead of 35 on 2 cores with another team alive."""
    n = decode_threads() if kind == "decode" else ALL_THREADS
    with _executors_lock:
        if n not in _executors:
            _executors[n] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{THREAD_NAME}-{kind}",
                                               initializer=_pin_thread_count(n))
        return _executors[n]


def _locked(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    with _TORCH:
        return fn(*args, **kwargs)


def on_a_model_thread() -> bool:
    return threading.current_thread().name.startswith(THREAD_NAME)


def _call(kind: str, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    if on_a_model_thread():  # nested call: already on a model thread and holding the lock
        return fn(*args, **kwargs)
    return _executor(kind).submit(_locked, fn, args, kwargs).result()


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn(*args, **kwargs)` on the decode thread and return its result (exceptions propagate)."""
    return _call("decode", fn, args, kwargs)


def call_prefill(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn(*args, **kwargs)` on the prefill thread (every torch thread) and return its result."""
    return _call("prefill", fn, args, kwargs)


def submit(fn: Callable[..., T], *args: Any) -> Future:
    """Queue `fn(*args)` on the decode thread and return at once; its result or exception stays in the Future."""
    return _executor("decode").submit(_locked, fn, args, {})


_timers: set[threading.Timer] = set()  # delayed submissions not yet queued
_timers_lock = threading.Lock()


def submit_after(delay_s: float, fn: Callable[..., T], *args: Any,
                 done: Callable[[Future], None] | None = None) -> None:
    """Queue `fn(*args)` on the decode thread `delay_s` seconds from now and return at once; a timer thread
    waits, so the decode thread stays free for other work meanwhile. `done(future)` is called once it ran."""
    def fire() -> None:
        future = submit(fn, *args)
        if done is not None:
            future.add_done_callback(done)
        with _timers_lock:
            _timers.discard(timer)

    timer = threading.Timer(delay_s, fire)
    timer.daemon = True
    with _timers_lock:
        _timers.add(timer)
    timer.start()


def settle() -> None:
    """Return once every delayed submission is queued and all work queued on the decode thread has run."""
    while True:
        with _timers_lock:
            waiting = list(_timers)
        if not waiting:
            break
        for timer in waiting:
            timer.join()
    call(lambda: None)


def on_model_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the function always runs on the decode thread."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return call(fn, *args, **kwargs)
    return wrapper


def on_prefill_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the function always runs on the prefill thread."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return call_prefill(fn, *args, **kwargs)
    return wrapper
