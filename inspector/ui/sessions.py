"""Server-side store of per-browser-session inspector state, keyed by an id held in `gr.State`.

The browser's `gr.State` holds only a short id string; the `Session` (KV cache, records) lives here.
Caps keep a shared host inside its memory: at most `max_sessions` live sessions (idle ones past the
time-to-live are evicted first), `max_steps` decode steps and `max_trace_mb` of KV cache + trace per
session (the handlers enforce the last two). `drop(id)` frees a session;
the app wires it to `gr.State(delete_callback=...)` and `demo.unload`.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from inspector.errors import InputError


@dataclass(frozen=True)
class Limits:
    max_sessions: int = 16
    max_steps: int = 256
    max_prompt_tokens: int = 1024
    session_ttl_s: int = 900
    max_trace_mb: int = 320


def limits_from_env() -> Limits:
    """Read caps via `inspector.ui.app_model.app_limits()` (INSPECTOR_MAX_SESSIONS, INSPECTOR_MAX_STEPS, ...)."""
    try:
        from inspector.ui.app_model import app_limits
    except ImportError:  # app_model not available: built-in defaults
        return Limits()
    lim = app_limits()
    return Limits(max_sessions=lim.max_sessions, max_steps=lim.max_steps,
                  max_prompt_tokens=lim.max_prompt_tokens, session_ttl_s=lim.session_ttl_s,
                  max_trace_mb=lim.max_trace_mb)


def new_ui_session(loaded: Any) -> Any:
    """The engine session behind one browser session: full recorder, with the logit lens computed when the
    Residual tab shows it (`Session.logit_lens(step)`) rather than on every step."""
    from inspector.session.session import Session

    return Session(loaded, lens=False)


class SessionCapError(InputError):
    """Too many live sessions on this server."""


@dataclass
class Entry:
    """One browser session's server-side state."""

    session: Any  # inspector.session.session.Session
    lock: threading.Lock = field(default_factory=threading.Lock)  # one model call at a time per session
    pause: threading.Event = field(default_factory=threading.Event)
    playing: bool = False
    max_new_tokens: int = 64
    selected: int | None = None  # selected position (chip click)
    last_used: float = field(default_factory=time.monotonic)
    uncached_ms: float | None = None  # the newest step re-run without cache (KV view toggle)
    preview: Any = None  # SampleRecord from a slider move, shown until the next step
    tab: str = "residual"  # the open view tab: only its plots are redrawn on each step


class SessionStore:
    """Thread-safe id -> Entry map with a size cap and idle time-to-live."""

    def __init__(self, factory: Callable[[], Any], limits: Limits) -> None:
        self._factory = factory
        self.limits = limits
        self._entries: dict[str, Entry] = {}
        self._mutex = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, sid: str | None) -> Entry | None:
        """The entry for `sid`, or None (never created, dropped or expired)."""
        with self._mutex:
            entry = self._entries.get(sid) if sid else None
            if entry is not None:
                entry.last_used = time.monotonic()
            return entry

    def get_or_create(self, sid: str | None) -> tuple[str, Entry]:
        """The existing entry, or a new one under a fresh id; SessionCapError when the server is full."""
        entry = self.get(sid)
        if entry is not None:
            return sid, entry  # type: ignore[return-value]
        with self._mutex:
            self._evict_expired()
            if len(self._entries) >= self.limits.max_sessions:
                raise SessionCapError(
                    f"the server is busy: {self.limits.max_sessions} sessions are open "
                    f"(INSPECTOR_MAX_SESSIONS); try again in a few minutes")
            new_id = secrets.token_hex(8)
            self._entries[new_id] = Entry(session=self._factory())
            return new_id, self._entries[new_id]

    def reset(self, sid: str | None) -> None:
        """Replace the session's engine state with a fresh one (keeps the id)."""
        entry = self.get(sid)
        if entry is not None:
            entry.pause.set()
            with entry.lock:
                self.reset_locked(entry)
                entry.pause.clear()

    def reset_locked(self, entry: Entry) -> None:
        """Fresh engine state for an entry whose lock the caller holds."""
        entry.session = None  # drop the old cache before building the new session
        entry.session = self._factory()
        entry.selected = None
        entry.uncached_ms = None
        entry.preview = None

    def drop(self, sid: str | None) -> None:
        """Free a session's records and KV cache (State delete_callback / page unload)."""
        with self._mutex:
            entry = self._entries.pop(sid, None) if sid else None
        if entry is not None:
            entry.pause.set()
            entry.session = None

    def _evict_expired(self) -> None:
        now = time.monotonic()
        stale = [k for k, e in self._entries.items()
                 if now - e.last_used > self.limits.session_ttl_s and not e.lock.locked()]
        for k in stale:
            self._entries.pop(k).session = None
