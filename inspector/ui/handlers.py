"""Event handlers: browser inputs -> the per-browser `Session` -> component values (via `render.Views`).

Every handler is wrapped by `shows_refusals` (`inspector.ui.refusals`): a refusal (`InspectorError`,
`ValueError`) puts one clear line in the status line instead of raising, so bad input never breaks the
page. Every number is parsed through the page's field table (`inspector.ui.fields`). No tensor math here: numbers come from the
session's records and on-demand attention methods; figures come from `inspector.viz`. Whatever calls into
the session's tensors runs on a model thread (`inspector.ui.model_thread`): prefills on the prefill thread,
everything else on the decode thread. Every cap is checked before any model work (`inspector.ui.admission`).
A session runs one model call at a time (`Entry.exclusive`); Play pressed while a prefill runs waits for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import gradio as gr

from inspector.engine.config import SamplingParams
from inspector.errors import InputError, InspectorError
from inspector.ui import admission, branch_handlers, link_handlers
from inspector.ui.decoding_controls import step_settings
from inspector.ui.fields import MAX_NEW, head_bound, layer_bound, position_bound, sampling_params
from inspector.ui.kv_view_policy import use_policy
from inspector.ui.play_speed import step_interval, wait_for_pace
from inspector.ui.model_thread import (decode_threads, on_model_thread, run_ahead_enabled, run_prefill, submit,
                                      submit_after)
from inspector.ui.refusals import shows_refusals
from inspector.ui.render import PLOT_KEYS, TOKEN_KEYS, VIEW_KEYS, Views
from inspector.ui.sessions import Entry, SessionExpiredError
from inspector.viz import inventory as vi
from inspector.viz import kvcache as vk

__all__ = ["Handlers", "PLOT_KEYS", "TOKEN_KEYS", "VIEW_KEYS", "sampling_params"]

log = logging.getLogger(__name__)

# The forward run ahead after a Step starts this long after the Step's views are built: Gradio encodes and
# sends the answer, and a browser on the same machine starts painting it, before the forward (and the lens's
# commitment layer behind the chips' badges) takes a core and the GIL (bench/ui.py measures both sides of it).
RUN_AHEAD_DELAY_S = 0.015
PLOT_INTERVAL_S = 0.4  # Play redraws the open tab's plots at most 2.5 times a second
MAX_SPEED_UPDATE_S = 0.1  # at the Speed control's max, Play updates the page at most 10 times a second
PREFILL_WAIT_S = 300.0  # Play pressed during a prefill waits this long for it to finish
PREFILL_START_WAIT_S = 1.0  # Play pressed together with Prefill waits this long for the prefill to start


def _refused(message: str, h: "Handlers", sid: Any, *_: Any) -> list:
    """A refused view event: the status line says why, every other view stays as it is."""
    return h.error_views(h.store.get(sid), message)


def _refused_with_sid(message: str, h: "Handlers", sid: Any, *_: Any) -> list:
    return [sid] + _refused(message, h, sid)


def _refused_step(message: str, h: "Handlers", sid: Any, *_: Any) -> list:
    return _refused(message, h, sid) + [gr.skip()]  # the `drawn` marker stays


class Handlers(Views):
    """The app's event handlers (rendering inherited from `Views`). Branching and run links are functions
    of (handlers, ...) in their own modules, bound here as methods."""

    branch = branch_handlers.branch
    switch = branch_handlers.switch
    link_fill = link_handlers.link_fill
    link_run = link_handlers.link_run

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_ahead = run_ahead_enabled()  # run each next decode forward before Step is pressed
        self.decode_threads = decode_threads()  # torch threads of the decode thread (a bad setting fails here)

    def queue_forward_ahead(self, entry: Entry | None) -> None:
        """Once a token's views are built, queue the next step's forward on the model thread
        (`Session.forward_ahead`): the next Step then only samples and draws. Never waits for it."""
        if self.run_ahead and entry is not None:
            submit_after(RUN_AHEAD_DELAY_S, self._forward_ahead, entry, done=_log_failure)

    def _forward_ahead(self, entry: Entry) -> None:
        s = entry.session
        if s is None or entry.lock.locked() or self._over_memory_cap(entry):
            return  # gone, reset or playing (Play steps at once anyway), or at the memory cap
        # every tab's chips show the token's commitment layer; the Residual tab shows the whole lens
        s.forward_ahead(lens=entry.tab == "residual", commitment=True)

    def _play_ahead(self, entry: Entry) -> None:
        """During Play, queue the next step's forward (no lens) as soon as a step's views are built: it runs
        while Gradio sends the update and Play paces, and the next step only samples."""
        if self.run_ahead:
            submit(self._next_forward, entry).add_done_callback(_log_failure)

    def _next_forward(self, entry: Entry) -> None:
        s = entry.session
        if s is not None and not self._over_memory_cap(entry):
            s.forward_ahead()

    def show_tab(self, tab: str):
        """A view tab was opened: remember it and draw its views now."""
        @shows_refusals(lambda message, sid, *_: _refused(message, self, sid))
        def handler(sid, layer, head):
            entry = self.store.get(sid)
            if entry is None:
                return [gr.skip()] * len(VIEW_KEYS)
            entry.tab = tab
            if entry.session is None or not entry.session.records or entry.lock.locked():
                return [gr.skip()] * len(VIEW_KEYS)  # playing: the next step draws it
            views = self.views(entry, layer, head)
            self.queue_forward_ahead(entry)  # on the Residual tab the next step's lens is needed too
            return views
        handler.__name__ = f"show_{tab}"
        return handler

    def run_prefill(self, sid, prompt, chat, system, params: SamplingParams, max_new: Any) -> tuple[str, Entry]:
        """Start a new run for this browser session (raises InspectorError/ValueError). Every cap is checked
        before the prefill thread sees the request."""
        max_new = admission.admit_max_new(MAX_NEW.parse(max_new), self.limits)
        admitted = admission.admit_prompt(self.loaded, self.limits, prompt, bool(chat), system, store=self.store,
                                          sid=sid)
        sid, entry = self.store.get_or_create(sid)
        with entry.exclusive("prefill"):
            self.store.reset_locked(entry)
            entry.session.set_decoding(step_settings(entry))  # the settings panel's penalties, bans, constraint
            use_policy(entry)  # the KV cache view's policy, if one was chosen
            entry.max_new_tokens = max_new
            run_prefill(entry.session.prefill_ids, admitted.ids, params, max_new_tokens=max_new,
                        tokenize_ms=admitted.tokenize_ms)
            link_handlers.remember_run(entry, prompt, chat, system)  # its link and trace: the run's text, not the box's
        return sid, entry

    @on_model_thread
    def run_step(self, sid, params: SamplingParams) -> Entry:
        """One decode step for this browser session (raises InspectorError/ValueError)."""
        entry = self._need_session(sid)
        with entry.exclusive("step"):
            self._one_step(entry, params)
        return entry

    @shows_refusals(_refused_with_sid)
    def prefill(self, sid, prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new, layer, head):
        """Tokenize + one forward over the prompt + sample token 1 (replaces any previous run)."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        sid, entry = self.run_prefill(sid, prompt, chat, system, params, max_new)
        views = self.views(entry, layer, head)
        self.queue_forward_ahead(entry)
        return [sid] + views

    def _need_session(self, sid) -> Entry:
        entry = self.store.get(sid)
        if entry is None and self.store.expired_message(sid):
            raise SessionExpiredError(self.store.expired_message(sid))
        if entry is None or entry.session is None or not entry.session.records:
            raise InputError("nothing to step yet: press Prefill first")
        return entry

    def page_load(self) -> list:
        """A new page: its session id (no slot is taken until the first prefill) and every view blank."""
        return [self.store.new_id()] + self.blank_views()

    @on_model_thread
    def _one_step(self, entry: Entry, params: SamplingParams) -> None:
        s = entry.session
        if s.finished:
            raise InputError(f"generation finished ({s.finished}): press Prefill to start again")
        if len(s.generated_ids) >= entry.max_new_tokens:
            raise InputError("max new tokens reached")
        if self._over_memory_cap(entry):
            raise InputError(f"memory cap reached: this session's KV cache and trace, with what its labs hold, fill the "
                             f"{self.limits.max_trace_mb} MiB this server allows (INSPECTOR_MAX_TRACE_MB); press Prefill "
                             "to start a new run")
        entry.preview = None
        entry.uncached_ms = None
        s.step(params)

    def _over_memory_cap(self, entry: Entry) -> bool:
        """The page's session and the labs of this browser hold the session's cap (`admission.over_session_cap`)."""
        return admission.over_session_cap(self.store, entry, self.limits)

    @shows_refusals(_refused_step)
    def step(self, sid, temperature, top_k, top_p, min_p, seed, layer, head) -> list:
        """The Step button: one decode step (feed the last sampled token, sample the next) -> one update of
        VIEW_KEYS + the drawn marker: status, tokens, text and the open tab's views. Usually the forward
        (with the commitment layer the chips show, and on the Residual tab the whole logit lens) already ran
        ahead (`queue_forward_ahead`), so this only samples and draws, and one update sent without Gradio's
        queue is the quickest way to the page (its script paints the token before it draws the plots;
        bench/ui.py compares)."""
        entry = self.run_step(sid, sampling_params(temperature, top_k, top_p, min_p, seed))
        views = self.views(entry, layer, head) + [self.drawn_marker(entry)]
        self.queue_forward_ahead(entry)
        return views

    @shows_refusals(_refused)
    def play(self, sid, temperature, top_k, top_p, min_p, seed, layer, head, speed: Any = None,
             fastest: Any = True) -> Iterator[list]:
        """Stream decode steps until EOS / max tokens / context end / Pause; one yield per step, at most
        `speed` steps a second unless `fastest` (the Speed control; a script's call without them: max).

        Status, tokens and text update on every step (at "max", at most every MAX_SPEED_UPDATE_S: an
        update then shows every token since the last); the open tab's plots at most every PLOT_INTERVAL_S
        (and always on the last step), so a browser that paints slower than the model steps never falls
        behind and steals the CPU from the model. The wait between steps is on the pause event: Pause
        ends it at once, and the model thread is free meanwhile."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        interval = step_interval(speed, fastest)
        entry = self._entry_when_prefilled(sid)
        prefilling = entry.activity == "prefill"
        if prefilling:
            yield [self.status(entry, "Play starts when the prefill finishes")] + [gr.skip()] * (len(VIEW_KEYS) - 1)
        entry.acquire("play", wait_s=PREFILL_WAIT_S if prefilling else 0.0)
        entry.pause.clear()
        entry.playing = True
        message = ""
        drawn = sent = 0.0
        try:
            self._need_session(sid)  # the prefill waited for may have failed
            while not entry.pause.is_set() and entry.session is not None and not entry.session.finished:
                started = time.monotonic()
                try:
                    self._one_step(entry, params)
                except InspectorError as exc:
                    message = str(exc)
                    break
                now = time.monotonic()
                if interval is None and now - sent < MAX_SPEED_UPDATE_S and not entry.session.finished:
                    self._play_ahead(entry)  # faster than the page updates: this token shows with the next update
                    continue
                draw = now - drawn >= PLOT_INTERVAL_S
                views = self.views(entry, layer, head, plots=draw)
                self._play_ahead(entry)
                yield views
                sent = now
                if draw:
                    drawn = now
                if not entry.session.finished:  # the last step's update is not held back
                    wait_for_pace(entry.pause, started, interval)
        except InspectorError as exc:
            message = str(exc)
        finally:
            entry.playing = False
            entry.release()
        if entry.session is not None:
            views = self.views(entry, layer, head, message or ("paused" if entry.pause.is_set() else ""))
            self.queue_forward_ahead(entry)
            yield views

    def _entry_when_prefilled(self, sid) -> Entry:
        """The session to play: one with a run, or one whose prefill is running (Play then waits for it).
        Play pressed together with Prefill may arrive first: wait briefly for that prefill to start."""
        deadline = time.monotonic() + PREFILL_START_WAIT_S
        while True:
            entry = self.store.get(sid)
            if entry is not None and (entry.activity == "prefill" or (entry.session is not None and entry.session.records)):
                if entry.activity != "prefill" and entry.session.finished:
                    raise InputError(f"generation finished ({entry.session.finished}): press Prefill to start again")
                return entry
            if time.monotonic() >= deadline:
                return self._need_session(sid)  # raises why there is nothing to play
            time.sleep(0.05)

    def pause(self, sid) -> None:
        """Ask a running Play to stop after the current step (own handler: never queued behind Play)."""
        entry = self.store.get(sid)
        if entry is not None:
            entry.pause.set()

    def reset(self, sid, layer, head):
        entry = self.store.get(sid)
        if entry is not None:
            self.store.reset(sid)
        return self.blank_views("reset: ready for a new prompt")

    # ---------- no-model events ----------
    @shows_refusals(lambda message, h, sid, *_: (gr.skip(), gr.skip(), h.status(h.store.get(sid), message, error=True)))
    @on_model_thread
    def preview(self, sid, temperature, top_k, top_p, min_p, seed):
        """A sampling control changed: redraw the newest step's distribution from its stored logits."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)  # a bad value is refused even before a run
        entry = self.store.get(sid)
        if entry is None or entry.session is None or not entry.session.records or entry.lock.locked():
            return gr.skip(), gr.skip(), gr.skip()  # nothing to redraw yet, or playing: the next step redraws
        entry.preview = entry.session.preview_sample(params)
        fig, info = self.sampling_views(entry)
        return fig, info, self.status(entry)

    @shows_refusals(_refused)
    @on_model_thread
    def resample(self, sid, temperature, top_k, top_p, min_p, seed, layer, head):
        """Re-draw the newest step's token from its stored logits with the current settings."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        entry = self._need_session(sid)
        with entry.exclusive("resample"):
            entry.preview = None
            entry.session.resample(params)
        views = self.views(entry, layer, head, "resampled the newest token")
        self.queue_forward_ahead(entry)
        return views

    @shows_refusals(_refused)
    def select(self, sid, position, layer, head):
        """A chip was clicked (or the position box, layer or head edited): redraw the position-dependent views."""
        layer_bound(self.loaded.config).parse(layer)  # a box left empty or out of range is named at once
        head_bound(self.loaded.config).parse(head)
        entry = self.store.get(sid)
        if entry is None or entry.session is None or not entry.session.records:
            return [gr.skip()] * len(VIEW_KEYS)
        last = entry.session.records[-1]
        pos = position_bound(last.start_pos + last.n_new - 1).parse(position)
        entry.selected = None if pos < 0 else pos
        if entry.lock.locked():
            return [gr.skip()] * len(VIEW_KEYS)  # playing: the next step draws the selection
        return self.views(entry, layer, head)

    @shows_refusals(lambda message, h, sid: (gr.skip(), h.status(h.store.get(sid), message, error=True)))
    def recompute(self, sid):
        """KV view button: time the newest step again without the cache."""
        entry = self.store.get(sid)
        if entry is None or entry.session is None or not entry.session.records:
            raise InputError("nothing to recompute yet: press Prefill first")
        with entry.exclusive("recompute"):
            s = entry.session
            rec = s.records[-1]
            entry.uncached_ms = run_prefill(uncached_forward_ms, s)
        return vk.recompute_html(rec.forward_ms, entry.uncached_ms, rec.start_pos + rec.n_new), self.status(entry)

    def inventory_view(self, layer):
        sel = None if layer in (None, "", "none") else int(layer)
        return vi.inventory_html(self.inventory, self.loaded.config.tie_word_embeddings, sel)


def _log_failure(done: Future) -> None:
    """A forward run ahead that failed is only logged: the next Step runs its own forward and says why."""
    if done.exception() is not None:
        log.warning("running the next forward ahead failed: %s", done.exception())


def uncached_forward_ms(session: Any) -> float:
    """Wall time of the newest step recomputed over the whole sequence without the KV cache."""
    _diff, ms = session.recompute_last_step()
    return float(ms)
