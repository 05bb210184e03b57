"""Every model call of the web app runs on one dedicated thread.

PyTorch's CPU kernels run on an OpenMP thread team that belongs to the calling thread. Gradio calls
handlers from a pool of worker threads (and iterates a streaming generator from whichever worker is
free), so model calls made straight from handlers create one team per worker thread, and the idle teams
spin against the busy one. Measured on the 2-core dev machine (SmolLM2-135M, decode step at context
~60): about 56 ms when every step runs on one thread, about 100 ms once a second thread has run model
code. One model thread also serializes model work across browser sessions, which is what a 2-core host
can do anyway. Anything that touches tensors (prefill, step, resample, on-demand attention, logit lens,
recompute) goes through `run()`; pure HTML/figure building may too (it is cheap).

Decode steps run with one intra-op thread fewer than torch has (`decode_threads()`, at least 1;
`INSPECTOR_DECODE_THREADS` overrides). A decode step is hundreds of small memory-bound ops, each a
parallel region whose threads wait for the slowest; on 2 cores, anything else that runs meanwhile (the
page's rendering when the browser is local, Gradio encoding and sending the previous step, another
user's request) stalls every region. Measured (SmolLM2-135M, context ~60, 2 cores): idle, 1 thread 86 ms
vs 2 threads 60 ms; with a 40%-busy neighbour 93 vs 127 ms; with a busy one 88 vs 591 ms; in the app with
the browser on the same machine (before the view bundle) 90 vs 103 ms a step, and Play 8.1-8.4 vs 6.5 tokens/s. Prefill (large
matmuls) keeps every thread.

`submit()` queues work without waiting for it: the handlers run each next decode forward ahead this way
(`Session.forward_ahead`) once a step's views are built, unless `INSPECTOR_RUN_AHEAD=0`
(`run_ahead_enabled()`). Queued on the same thread, it always finishes before a later Step's own call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import wraps
from typing import Any, Callable, TypeVar

import torch

from inspector.ui.app_model import positive_int_env
from inspector.errors import InputError

T = TypeVar("T")

THREAD_NAME = "inspector-model"
_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)  # its thread starts on first use


def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn(*args, **kwargs)` on the model thread and return its result (exceptions propagate).
    Called from the model thread itself, it just calls `fn` (no deadlock on nested calls)."""
    if threading.current_thread().name.startswith(THREAD_NAME):
        return fn(*args, **kwargs)
    return _EXECUTOR.submit(fn, *args, **kwargs).result()


def submit(fn: Callable[..., T], *args: Any) -> Future:
    """Queue `fn(*args)` on the model thread and return at once; its result or exception stays in the Future."""
    return _EXECUTOR.submit(fn, *args)


def on_model_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the function always runs on the model thread."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return run(fn, *args, **kwargs)
    return wrapper


def decode_threads() -> int:
    """Intra-op threads for a decode step: `INSPECTOR_DECODE_THREADS`, else torch's count less one (>= 1).
    Call it before the model thread has changed its count (the app does, when it builds its handlers)."""
    n = positive_int_env("INSPECTOR_DECODE_THREADS")
    return n if n is not None else max(1, torch.get_num_threads() - 1)


def run_ahead_enabled() -> bool:
    """`INSPECTOR_RUN_AHEAD`: 1 or unset runs each next decode forward ahead; 0 runs it when Step is pressed."""
    raw = (os.environ.get("INSPECTOR_RUN_AHEAD") or "").strip()
    if raw not in ("", "0", "1"):
        raise InputError(f"INSPECTOR_RUN_AHEAD must be 0 or 1, got {raw!r}")
    return raw != "0"


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads on the calling thread, then restore its count."""
    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
