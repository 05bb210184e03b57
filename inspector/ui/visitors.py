"""Server-side store of per-browser-session inspector state, keyed by an id held in `gr.State`.

The browser's `gr.State` holds only a short id string (given at page load by `new_id()`, or by the first
prefill of a script client); the `Session` (KV cache, records) lives here. Caps keep a shared host inside
its memory (`AppLimits`): at most `max_sessions` live sessions. When a new visitor needs a slot and the
store is full, the least recently used session that is not busy (no prefill, step or Play running) is
evicted, and so is any idle session past the time-to-live; an owner who comes back is told that its
session expired (`expired_message`). A newcomer is refused only when every session is busy.
`drop(id)` frees a session; the app wires it to `gr.State(delete_callback=...)` and `demo.unload`.
`shared` holds the process-wide lab state (the Quantization lab's models: one per server, never per
session), and `live()` every live visitor, so admission can count what the whole server holds.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from inspector.errors import InputError
from inspector.ui.app_model import AppLimits
from inspector.viz.registry import newest_position

EXPIRED_IDS_KEPT = 4096  # ids of evicted sessions remembered, to tell a returning owner what happened
_TAB_MUTEX = threading.Lock()  # `Visitor.open_tab`'s compare-and-set (held for a few instructions)
_versions = itertools.count(1)  # one counter for every visitor: a later state anywhere has a larger number


def new_ui_session(loaded: Any) -> Any:
    """The engine session behind one browser session: full recorder, with the logit lens computed when the
    Residual tab shows it (`Session.logit_lens(step)`) rather than on every step."""
    from inspector.session.session import Session

    return Session(loaded, lens=False)


class VisitorCapError(InputError):
    """Every session slot on this server is busy."""


class VisitExpiredError(InputError):
    """The session behind this id was evicted (idle too long, or its slot was needed)."""


class BusyError(InputError):
    """Another model call of the same session is running (usually Play)."""


@dataclass
class Visitor:
    """One browser session's server-side state."""

    session: Any  # inspector.session.session.Session
    sid: str = ""  # its id in the store
    lock: threading.Lock = field(default_factory=threading.Lock)  # one model call at a time per session
    activity: str | None = None  # what holds the lock: "prefill" | "step" | "play" | ...
    pause: threading.Event = field(default_factory=threading.Event)
    playing: bool = False
    max_new_tokens: int = 64
    selected: int | None = None  # selected position (chip click)
    last_used: float = field(default_factory=time.monotonic)
    uncached_ms: float | None = None  # the newest step re-run without cache (KV view toggle)
    preview: Any = None  # SampleRecord from a slider move, shown until the next step
    tab: str = "residual"  # the open view tab: only its plots are redrawn on each step
    tab_order: int = 0  # the page's count of tab openings when `tab` was opened (`open_tab`)
    branches: Any = None  # inspector.session.branches.BranchTree of the run, once it has branched
    origin: Any = None  # inspector.ui.link_handlers.RunOrigin: the text the run was prefilled from
    decoding: Any = None  # the settings panel's DecodingSettings, once applied (`inspector.ui.decoding_controls`)
    labs: dict[str, Any] = field(default_factory=dict)  # panel key -> its PanelState (`inspector.ui.panel`)
    # which state of the run the page shows: a new number (`new_version`) each time a model call releases the
    # visitor, a prefill is asked for, or a selection or preview changes, so an update built before a later one
    # (a sampling preview answered after a Step, a tab's draw answered after a chip click) is known as older
    version: int = field(default_factory=lambda: next(_versions))

    def open_tab(self, tab: str, order: Any = None) -> bool:
        """The page opened view tab `tab`. `order` is the page's count of its tab openings (each opening's event
        sends it: TAB_OPENED_JS in inspector/ui/app.py): Gradio may run two openings' handlers in either order,
        so an opening older than the one taken leaves the newer tab open. Without an order (a script's call)
        the tab is taken. Returns whether `tab` is the open tab now."""
        order = int(order) if isinstance(order, (int, float)) else None
        with _TAB_MUTEX:
            if order is not None and order < self.tab_order:
                return False
            self.tab = tab
            if order is not None:
                self.tab_order = order
            return True

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def newest_position(self) -> int:
        """The position of the newest token the run holds (its last record's last position)."""
        return newest_position(self.session.records[-1])

    def selected_position(self) -> int:
        """The position the views show: the one clicked, or the newest when none is (or it is gone)."""
        newest = self.newest_position()
        return newest if self.selected is None or not 0 <= self.selected <= newest else self.selected

    def acquire(self, activity: str, wait_s: float = 0.0) -> None:
        """Take the session's lock for `activity`; BusyError naming what runs if it stays taken for `wait_s`."""
        if not (self.lock.acquire(timeout=wait_s) if wait_s > 0 else self.lock.acquire(blocking=False)):
            running = self.activity or "another request"
            if running == "play":
                raise BusyError("already playing: press Pause to stop" if activity == "play"
                                else "busy: playing — press Pause first")
            raise BusyError(f"busy: a {running} is running for this session — wait for it to finish")
        self.activity = activity

    def release(self) -> None:
        self.activity = None
        self.new_version()
        self.lock.release()

    def new_version(self) -> None:
        """What the views show changed: a new version, so an update drawn before it is known as older. A change
        made without the lock (a selection, a preview) is made on the model thread, where views are drawn, so
        no update is drawn half before it and half after."""
        self.version = next(_versions)

    @contextmanager
    def exclusive(self, activity: str, wait_s: float = 0.0) -> Iterator[None]:
        """Hold the session's lock for `activity` (see `acquire`)."""
        self.acquire(activity, wait_s)
        try:
            yield
        finally:
            self.release()


class Visitors:
    """Thread-safe id -> Visitor map with a size cap, least-recently-used eviction and an idle time-to-live."""

    def __init__(self, factory: Callable[[], Any], limits: AppLimits) -> None:
        self._factory = factory
        self.limits = limits
        self._visitors: dict[str, Visitor] = {}
        self._expired: OrderedDict[str, str] = OrderedDict()  # evicted id -> why
        self._mutex = threading.Lock()
        self.shared: dict[str, Any] = {}  # lab -> process-wide state (inspector.ui.admission counts it once)
        self._prefills: dict[str, float] = {}  # id -> when its page asked for a prefill that has not started
        # id without a visitor yet -> the view tab its page opened, and that opening's order (`Visitor.open_tab`)
        self._tabs: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._visitors)

    def live(self) -> list[Visitor]:
        """Every live visitor (a snapshot: entries may come and go as soon as it is taken)."""
        with self._mutex:
            return list(self._visitors.values())

    @staticmethod
    def new_id() -> str:
        """A fresh session id (page load); no slot is taken until its first prefill."""
        return secrets.token_hex(8)

    def get(self, sid: str | None) -> Visitor | None:
        """The visitor for `sid`, or None (never created, dropped or evicted)."""
        with self._mutex:
            visitor = self._visitors.get(sid) if sid else None
            if visitor is not None:
                visitor.last_used = time.monotonic()
            return visitor

    def run_visitor(self, sid: str | None) -> Visitor:
        """The visitor of a browser session that holds a run; InputError saying why there is none (expired, or
        nothing prefilled yet)."""
        visitor = self.get(sid)
        if visitor is None and self.expired_message(sid):
            raise VisitExpiredError(self.expired_message(sid))
        if visitor is None or visitor.session is None or not visitor.session.records:
            raise InputError("nothing to step yet: press Prefill first")
        return visitor

    # ---- a prefill the page asked for: a Step or Play pressed right after Prefill acts on the new run
    def ask_prefill(self, sid: str | None) -> None:
        """The page asked for a prefill (the first link of its chain, before the prefill is even queued)."""
        if sid:
            with self._mutex:
                self._prefills[sid] = time.monotonic()
                visitor = self._visitors.get(sid)
                if visitor is not None:
                    visitor.new_version()  # what was drawn before the ask is older than it

    def prefill_started(self, sid: str | None) -> None:
        """The asked prefill holds the session now, or was refused: nothing is coming any more. A new version,
        so an update drawn while it was coming (its status says "prefill: waiting") is older than the prefill's
        own answer, whichever reaches the page last (a refused prefill changes nothing else)."""
        with self._mutex:
            self._prefills.pop(sid, None)
            visitor = self._visitors.get(sid) if sid else None
            if visitor is not None:
                visitor.new_version()

    def prefill_coming(self, sid: str | None) -> bool:
        """True while the page's asked prefill has not started."""
        with self._mutex:
            return bool(sid) and sid in self._prefills

    def wait_for_prefill(self, sid: str | None, timeout_s: float) -> None:
        """Return once no prefill is asked for or running for this session (at most `timeout_s` seconds; an
        ask older than that, whose prefill never came, is forgotten)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._mutex:
                asked = self._prefills.get(sid) if sid else None
                if asked is not None and time.monotonic() - asked > timeout_s:
                    self._prefills.pop(sid, None)
                    asked = None
                visitor = self._visitors.get(sid) if sid else None
            if asked is None and (visitor is None or visitor.activity != "prefill"):
                return
            time.sleep(0.02)

    def expired_message(self, sid: str | None) -> str | None:
        """Why the session behind `sid` is gone, if it was evicted; None otherwise."""
        with self._mutex:
            why = self._expired.get(sid) if sid else None
        return f"your session expired ({why}): press Prefill to start again" if why else None

    def get_or_create(self, sid: str | None) -> tuple[str, Visitor]:
        """The existing visitor, or a new one (under `sid` when given, else a fresh id). Evicts an idle session
        when the store is full; VisitorCapError when every session is busy."""
        visitor = self.get(sid)
        if visitor is not None:
            return sid, visitor  # type: ignore[return-value]
        with self._mutex:
            self._evict_expired()
            if len(self._visitors) >= self.limits.max_sessions and not self._evict_least_recent():
                raise VisitorCapError(
                    f"the server is busy: all {self.limits.max_sessions} sessions are running "
                    f"(INSPECTOR_MAX_SESSIONS); try again in a moment")
            new_id = sid or self.new_id()
            self._expired.pop(new_id, None)
            tab, order = self._tabs.pop(new_id, (Visitor.tab, 0))
            self._visitors[new_id] = Visitor(session=self._factory(), sid=new_id, tab=tab, tab_order=order)
            return new_id, self._visitors[new_id]

    def remember_tab(self, sid: str, tab: str, order: Any = None) -> None:
        """The view tab a page opened before its first Prefill (no visitor yet): the visitor made for `sid`
        starts on it, so its first views are that tab's; an older opening (`order`, as in `Visitor.open_tab`)
        leaves a newer one. Made meanwhile, the visitor opens it. Only the newest EXPIRED_IDS_KEPT ids are kept."""
        order = int(order) if isinstance(order, (int, float)) else None
        with self._mutex:
            visitor = self._visitors.get(sid)
            if visitor is None:
                taken = self._tabs.get(sid, (Visitor.tab, 0))[1]
                if order is None or order >= taken:  # as `Visitor.open_tab` takes an opening
                    self._tabs[sid] = (tab, taken if order is None else order)
                self._tabs.move_to_end(sid)
                while len(self._tabs) > EXPIRED_IDS_KEPT:
                    self._tabs.popitem(last=False)
        if visitor is not None:
            visitor.open_tab(tab, order)

    def reset(self, sid: str | None) -> None:
        """Replace the session's engine state with a fresh one (keeps the id); stops Play first."""
        visitor = self.get(sid)
        if visitor is not None:
            visitor.pause.set()
            with visitor.lock:
                self.reset_locked(visitor)
                visitor.pause.clear()
                visitor.new_version()

    def reset_locked(self, visitor: Visitor) -> None:
        """Fresh engine state for an visitor whose lock the caller holds."""
        visitor.session = None  # drop the old cache before building the new session
        visitor.session = self._factory()
        visitor.selected = None
        visitor.uncached_ms = None
        visitor.preview = None
        visitor.branches = None

    def drop(self, sid: str | None) -> None:
        """Free a session's records and KV cache (State delete_callback / page unload)."""
        with self._mutex:
            visitor = self._visitors.pop(sid, None) if sid else None
            if sid:
                self._tabs.pop(sid, None)  # a page closed before its first Prefill
        if visitor is not None:
            visitor.pause.set()
            visitor.session = None
            visitor.labs.clear()

    def _evict(self, sid: str, why: str) -> None:
        visitor = self._visitors.pop(sid)
        visitor.session = None
        visitor.labs.clear()
        self._expired[sid] = why
        while len(self._expired) > EXPIRED_IDS_KEPT:
            self._expired.popitem(last=False)

    def _evict_expired(self) -> None:
        now = time.monotonic()
        for sid in [k for k, e in self._visitors.items()
                    if now - e.last_used > self.limits.session_ttl_s and not e.busy]:
            self._evict(sid, f"idle for more than {self.limits.session_ttl_s} s")
        for sid in [k for k, asked in self._prefills.items() if now - asked > self.limits.session_ttl_s]:
            del self._prefills[sid]  # a page closed between its Prefill click and the prefill: none is coming

    def _evict_least_recent(self) -> bool:
        """Evict the least recently used session that is not busy; False when every session is busy."""
        idle = [(e.last_used, k) for k, e in self._visitors.items() if not e.busy and not e.playing]
        if not idle:
            return False
        self._evict(min(idle)[1], "the server was full and it was the least recently used")
        return True
