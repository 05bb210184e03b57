"""Every model call of the web app runs on one dedicated thread.

PyTorch's CPU kernels run on an OpenMP thread team that belongs to the calling thread. Gradio calls
handlers from a pool of worker threads (and iterates a streaming generator from whichever worker is
free), so model calls made straight from handlers create one team per worker thread, and the idle teams
spin against the busy one. Measured on the 2-core dev machine (SmolLM2-135M, decode step at context
~60): about 56 ms when every step runs on one thread, about 100 ms once a second thread has run model
code. One model thread also serializes model work across browser sessions, which is what a 2-core host
can do anyway. Anything that touches tensors (prefill, step, resample, on-demand attention, logit lens,
recompute) goes through `run()`; pure HTML/figure building may too (it is cheap).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import wraps
from typing import Any, Callable, TypeVar

T = TypeVar("T")

THREAD_NAME = "inspector-model"
_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)  # its thread starts on first use


def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn(*args, **kwargs)` on the model thread and return its result (exceptions propagate).
    Called from the model thread itself, it just calls `fn` (no deadlock on nested calls)."""
    if threading.current_thread().name.startswith(THREAD_NAME):
        return fn(*args, **kwargs)
    return _EXECUTOR.submit(fn, *args, **kwargs).result()


def on_model_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the function always runs on the model thread."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return run(fn, *args, **kwargs)
    return wrapper
