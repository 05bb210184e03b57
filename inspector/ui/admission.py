"""Admission: every cap a request must pass, checked before any model work (milliseconds, off the model thread).

A refused request never reaches the model threads, so it neither waits behind other visitors' forwards
nor delays them. `admit_prompt` checks, in order: the prompt's characters (before tokenizing a huge
paste), its tokens after the chat template against `max_prompt_tokens` and the model's context window,
and the memory the session would hold after the prefill against `max_trace_mb`. `admit_max_new` checks
the requested number of new tokens against `max_steps`.

`estimated_retained_nbytes` (`inspector.session.budget`) predicts `Session.retained_nbytes` from the
model's shape alone; tests hold it to the real number.

Memory of the panels. A browser session holds, besides the page's session, what its panels keep: each
panel's state reports it (`PanelState.nbytes()`, `held_nbytes(visitor)` sums them by panel): the Speculative
lab's run, a target KV cache and, for the early-exit drafter, the drafter's cache of its first L layers
(`estimated_speculative_nbytes` predicts both before Start); the Serving lab's block pool; the records
every lab keeps. Process-wide, counted once for the server: the Quantization lab's models, and the Training
lab's step while it runs (its gradients and activations: `reserved`, one step at a time since it holds the
model's thread). The Quantization lab's models are process-wide, built once per
scheme and shared by every visitor (kept in `Visitors.shared`): `process_nbytes(store)` counts them
once, as built (`QuantLab.extra_bytes`); `planned_quant_nbytes` bounds a scheme's model before its build.
The server's cap is what the session caps promise in all, `max_sessions` × `max_trace_mb`
(`server_cap_bytes`); the shared models come off it once, so each session's cap is `max_trace_mb` less
1/`max_sessions` of them (`session_cap_bytes`). Then the server's total stays within its cap however the
sessions grow:
- `admit_memory(store, sid, limits, part, need)`: this session holding `need` bytes for `part` (SESSION or
  a lab, in place of what that part holds now) plus what its other parts hold must stay under its cap;
  `admit_prompt(..., store=, sid=)` applies it to the page's prefill, `over_session_cap` to each step.
- `admit_process_memory(store, limits, new_bytes)`: a new shared model is built only when every session,
  at max(what it holds, its smaller cap), and the shared models still fit the server's cap.
Transient memory (activations, a lab's throwaway caches during a call) is not counted, as for the page.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.quant.model import planned_weight_bytes
from inspector.quant.schemes import parse_scheme
from inspector.session.budget import allocated_positions, estimated_retained_nbytes, kv_bytes
from inspector.ui.app_model import AppLimits
from inspector.ui.fields import MAX_NEW
from inspector.units import format_bytes

MAX_CHARS_PER_TOKEN = 32  # a prompt longer than this many characters per allowed token is refused untokenized
SESSION = "session"  # the page's own part of a browser session (its `Session`), beside the labs' parts


@dataclass(frozen=True)
class AdmittedPrompt:
    ids: list[int]
    tokenize_ms: float


def token_cap(limits: AppLimits) -> int:
    """Tokens one visitor's Serving lab run may hold in all: prompts + continuations x max new tokens, summed."""
    return limits.max_prompt_tokens + limits.max_steps


def admit_max_new(value: Any, limits: AppLimits) -> int:
    """The max-new-tokens control (`fields.MAX_NEW`) as a positive whole number within `max_steps`; InputError
    naming the field otherwise."""
    n = MAX_NEW.parse(value)
    if n <= 0:
        raise InputError(f"max new tokens must be > 0, got {n}")
    if n > limits.max_steps:
        raise InputError(f"max new tokens is capped at {limits.max_steps} here (INSPECTOR_MAX_STEPS)")
    return int(n)


def admit_prompt(loaded: Any, limits: AppLimits, prompt: Any, chat: bool, system: Any, *, store: Any = None,
                 sid: str | None = None) -> AdmittedPrompt:
    """Tokenize the prompt (chat template optional) and check every cap; InputError naming the first one hit.
    With the session `store` (and the browser's `sid`), the prefill's memory is checked with what the session's
    labs hold and the shared models' share (`admit_memory`), for the page's own prefill."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type something first")
    system = system if isinstance(system, str) and system.strip() and chat else None
    chars = len(prompt) + (len(system) if system else 0)
    max_chars = limits.max_prompt_tokens * MAX_CHARS_PER_TOKEN
    if chars > max_chars:
        raise InputError(f"the prompt is {chars} characters; this server allows {max_chars} "
                         f"({limits.max_prompt_tokens} tokens, INSPECTOR_MAX_PROMPT_TOKENS)")
    t0 = time.perf_counter()
    ids = loaded.tokenizer.prompt_ids(prompt, chat, system)
    tokenize_ms = (time.perf_counter() - t0) * 1e3
    n = len(ids)
    if n > limits.max_prompt_tokens:
        raise InputError(f"the prompt is {n} tokens; this server allows {limits.max_prompt_tokens} "
                         f"(INSPECTOR_MAX_PROMPT_TOKENS)")
    context = loaded.config.max_position_embeddings
    if n >= context:
        raise InputError(f"the prompt is {n} tokens; the model's context window is {context} tokens")
    elem = loaded.model.model.embed_tokens.weight.element_size()
    need = estimated_retained_nbytes(loaded.config, elem, n)
    if need >= limits.max_trace_mb * 2**20:
        raise InputError(f"this prompt's KV cache and trace would exceed the {limits.max_trace_mb} MiB this server "
                         f"allows per session (INSPECTOR_MAX_TRACE_MB): try a shorter prompt")
    if store is not None:
        admit_memory(store, sid, limits, SESSION, need)
    return AdmittedPrompt(ids, tokenize_ms)


# ---- memory of the labs, per session and for the whole server ------------------------------------------

def estimated_speculative_nbytes(config: Any, elem_bytes: int, n_prompt: int, max_new: int,
                                 draft_layers: int = 0) -> int:
    """Bytes a Speculative lab run holds at most: the target's KV cache and, for an early-exit drafter of
    `draft_layers` layers, its own cache of those layers. A run's cache never holds more than the prompt
    and its max new tokens (a verify's k+1 positions stop there; see `SpeculativeDecoder.round`)."""
    positions = allocated_positions(min(n_prompt + max_new, config.max_position_embeddings))
    per_layer = kv_bytes(config, positions, elem_bytes) // config.num_hidden_layers
    return per_layer * (config.num_hidden_layers + draft_layers)


def draft_layers(drafter: Any) -> int:
    """Layers a drafter keeps a KV cache for: L for `early-exit:L`, 0 for prompt lookup (no model)."""
    return int(getattr(drafter, "layers", 0) or 0) if getattr(drafter, "cache", None) is not None else 0


def held_nbytes(visitor: Any) -> dict[str, int]:
    """What one browser session holds now, by part (measured): SESSION and each panel whose state holds memory."""
    out: dict[str, int] = {}
    if visitor.session is not None:
        out[SESSION] = visitor.session.retained_nbytes
    for key, state in list(visitor.labs.items()):
        n = state.nbytes()
        if n:
            out[key] = n
    return out


def process_nbytes(store: Any) -> int:
    """Bytes the process-wide lab state holds beyond the model, counted once: the quantized models built."""
    return sum(int(getattr(state, "extra_bytes", 0)) for state in store.shared.values())


def planned_quant_nbytes(loaded: Any, scheme: str) -> int:
    """Bytes building `scheme`'s quantized model adds to the process, from shapes (0 for fp32). An upper
    bound: it also counts the norm weights and RoPE table the model shares with fp32 (~0.1% for SmolLM2)."""
    parsed = parse_scheme(scheme)
    return 0 if parsed.weights == "fp32" else planned_weight_bytes(loaded.model, parsed)


def server_cap_bytes(limits: AppLimits) -> int:
    """The server's memory for sessions and labs: what the per-session caps promise in all."""
    return limits.max_sessions * limits.max_trace_mb * 2**20


def session_cap_bytes(store: Any, limits: AppLimits, process_bytes: int | None = None) -> int:
    """What one session may hold: `max_trace_mb`, less its share of the process-wide lab state."""
    labs = process_nbytes(store) if process_bytes is None else process_bytes
    return limits.max_trace_mb * 2**20 - -(-labs // limits.max_sessions)


def _mb(n: int) -> str:
    return format_bytes(n)


def _labs_note(store: Any, limits: AppLimits) -> str:
    labs = process_nbytes(store)
    return f", less {_mb(-(-labs // limits.max_sessions))} for the labs' shared models" if labs else ""


def admit_memory(store: Any, sid: str | None, limits: AppLimits, part: str, need: int) -> None:
    """InputError when this session, holding `need` bytes for `part` (SESSION or a lab) in place of what that part
    holds now, would reach its cap (`session_cap_bytes`: the page and every lab together)."""
    visitor = store.get(sid)
    parts = held_nbytes(visitor) if visitor is not None else {}
    total = sum(parts.values()) - parts.get(part, 0) + need
    if total >= session_cap_bytes(store, limits):
        others = ", ".join(f"{k} {_mb(v)}" for k, v in parts.items() if k != part and v)
        raise InputError(f"this would hold {_mb(total)} for your session ({part} {_mb(need)}"
                         f"{', ' + others if others else ''}); this server allows {limits.max_trace_mb} MiB per session "
                         f"(INSPECTOR_MAX_TRACE_MB{_labs_note(store, limits)}): try a shorter prompt or fewer tokens")


def over_session_cap(store: Any, visitor: Any, limits: AppLimits) -> bool:
    """True when a session already holds its cap (the page and its labs): refuse its next step."""
    return sum(held_nbytes(visitor).values()) >= session_cap_bytes(store, limits)


def admit_process_memory(store: Any, limits: AppLimits, new_bytes: int) -> None:
    """InputError unless the process-wide lab state may grow by `new_bytes` with every session still able to
    reach its (then smaller) cap within the server's: Σ max(held, cap) over the slots + the labs <= server cap."""
    if new_bytes <= 0:
        return
    labs = process_nbytes(store) + new_bytes
    cap = session_cap_bytes(store, limits, labs)
    live = [sum(held_nbytes(e).values()) for e in store.live()]
    total = sum(max(n, cap) for n in live) + (limits.max_sessions - len(live)) * max(cap, 0) + labs
    if cap <= 0 or total > server_cap_bytes(limits):
        raise InputError(f"the server is full: {_mb(new_bytes)} more of the labs' shared models ({_mb(labs)} in all) "
                         f"would not leave every session its {limits.max_trace_mb} MiB within the "
                         f"{_mb(server_cap_bytes(limits))} this server allows (INSPECTOR_MAX_SESSIONS x "
                         f"INSPECTOR_MAX_TRACE_MB); try again later")


@dataclass
class Reservation:
    """Process-wide memory held while a call runs (`reserved`); `extra_bytes` as the shared models report it."""

    extra_bytes: int


_reserving = threading.Lock()
_reservation_ids = itertools.count()


@contextmanager
def reserved(store: Any, limits: AppLimits, what: str, nbytes: int) -> Iterator[None]:
    """Hold `nbytes` of the server's memory for `what` while the block runs: admitted as a new shared model
    would be (`admit_process_memory`, InputError when the server is full), counted by every admission check
    meanwhile, and released after it, however it ends."""
    key = f"{what}:{next(_reservation_ids)}"
    with _reserving:  # the check and the reservation as one step: two calls never both take the last room
        admit_process_memory(store, limits, nbytes)
        store.shared[key] = Reservation(nbytes)
    try:
        yield
    finally:
        store.shared.pop(key, None)
