"""The page's handlers: Prefill, Step, Play, Pause, Reset, Resample, the sampling preview and the selection, each
browser input -> the browser session's `Session` -> the views that changed ({view key: value}).

Every handler is decorated with `@refuses` (`inspector.ui.panel`): a refusal (`InspectorError`, `ValueError`)
puts one line in the status line, and every other view stays as it is. Numbers parse through the page's
field table (`inspector.ui.fields`); a Prefill's controls become one `RunRequest`, checked once
(`fields.page_request`), and its session is made from it (`session_for`: the session keeps the request, as
the CLI's and the API's runs do). No tensor math here: the views come from `inspector.ui.render` and the
view panels. Whatever touches the session's tensors runs on a model thread (`inspector.ui.model_thread`):
prefills on the prefill thread, everything else on the decode thread. Every cap is checked before any model
work (`inspector.ui.admission`). A session runs one model call at a time (`Visitor.exclusive`); Play holds it
(`inspector.ui.play`), and Play pressed while a prefill runs waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from inspector.errors import InputError, InspectorError
from inspector.quant.requested import Checked, session_for
from inspector.session.settings import DecodingSettings, SamplingParams
from inspector.ui import admission, link_handlers
from inspector.ui.app_model import run_ahead_enabled
from inspector.ui.bundle import bundled
from inspector.ui.decoding_controls import step_settings
from inspector.ui.fields import head_bound, layer_bound, page_request, position_bound, sampling_params
from inspector.ui.model_thread import decode_threads, on_model_thread, call_prefill, submit, submit_after
from inspector.ui.panel import Page, bind
from inspector.ui.refusals import keep_sid, refuses
from inspector.ui.play import PREFILL_WAIT_S, PlayPace, play_steps, unhindered, visitor_when_prefilled
from inspector.ui.render import PLOT_KEYS, TOKEN_KEYS, VIEW_KEYS, Renderer
from inspector.ui.selections import fresh_selections, pinned_position
from inspector.ui.visitors import Visitor
from inspector.ui.views.kv_policy import use_policy

__all__ = ["Handlers", "PLOT_KEYS", "TOKEN_KEYS", "VIEW_KEYS", "sampling_params"]

log = logging.getLogger(__name__)

# The forward run ahead after a Step starts this long after the Step's views are built: Gradio encodes and
# sends the answer, and a browser on the same machine starts painting it, before the forward (and the lens's
# commitment layer behind the chips' badges) takes a core and the GIL (bench/ui.py measures both sides of it).
RUN_AHEAD_DELAY_S = 0.015


class Handlers:
    """The run's event handlers over the page (its model, sessions, caps and view panels)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.loaded, self.store = page.loaded, page.store
        self.render = Renderer(page)
        self.run_ahead = run_ahead_enabled()  # run each next decode forward ahead of Step
        self.decode_threads = decode_threads()  # torch threads of the decode thread (a bad setting fails here)
        self.bundle: Any = None  # the page's ViewBundle, once `build_app` lays it out

    @property
    def limits(self) -> Any:
        """The app's caps (`Page.limits`: the store's), read when a handler runs."""
        return self.page.limits

    @classmethod
    def bare(cls, loaded: Any, store: Any) -> "Handlers":
        """The run's handlers over every view panel of the registry, without a browser page (tests, scripts);
        the caps are the store's."""
        from inspector.ui.registry import build_panels

        page = Page.bare(loaded, store)
        build_panels(page)
        page.handlers = cls(page)
        return page.handlers

    # ---- wiring
    def on(self, triggers: Any, handler: Callable[..., Any], inputs: list, lead: list | None = None,
           **options: Any) -> Any:
        """Bind a handler whose result is {view key: value} (after `lead` ordinary outputs) to the view bundle
        (`inspector.ui.panel.bind`: one trigger or a list); returns the event."""
        lead = lead or []
        name = getattr(handler, "__name__", None) or getattr(getattr(handler, "func", None), "__name__", "event")
        options.setdefault("api_name", f"ui_{name}")  # the script API's names (`prefill`, `step`) stay free
        return bind(triggers, bundled(handler, lead=len(lead)), inputs, [*lead, self.bundle], **options)

    def refusal(self, message: str, sid: Any = None) -> dict[str, Any]:
        """A refused run event: the status line says why (with the run's phase), every other view stays."""
        return self.render.error_views(self.store.get(sid), message)

    # ---- views
    def views(self, visitor: Visitor, layer: Any, head: Any, message: str = "", error: bool = False,
              plots: bool = True, tab: str | None = None) -> dict[str, Any]:
        return self.render.views(visitor, layer, head, message, error, plots, tab)

    def need_session(self, sid: Any) -> Visitor:
        """The visitor of a browser session that holds a run (InputError saying why there is none)."""
        return self.store.run_visitor(sid)

    # ---- running ahead
    def queue_forward_ahead(self, visitor: Visitor | None) -> None:
        """Once a token's views are built, queue the next step's forward on the model thread
        (`Session.forward_ahead`): the next Step then only samples and draws. Never waits for it."""
        if self.run_ahead and visitor is not None:
            submit_after(RUN_AHEAD_DELAY_S, self._forward_ahead, visitor, done=_log_failure)

    def _forward_ahead(self, visitor: Visitor) -> None:
        s = visitor.session
        if s is None or visitor.lock.locked() or self._over_memory_cap(visitor):
            return  # gone, reset or playing (Play steps at once anyway), or at the memory cap
        # every tab's chips show the token's commitment layer; the open view gets what it shows (`Renderer.ahead`)
        s.forward_ahead(commitment=True, **self.render.ahead(visitor))

    def _play_ahead(self, visitor: Visitor) -> None:
        """During Play, queue the next step's forward (no lens) as soon as a step's views are built: it runs
        while Gradio sends the update and Play paces, and the next step only samples."""
        if self.run_ahead:
            submit(self._next_forward, visitor).add_done_callback(_log_failure)

    def _next_forward(self, visitor: Visitor) -> None:
        s = visitor.session
        if s is not None and not self._over_memory_cap(visitor):
            s.forward_ahead()

    def _over_memory_cap(self, visitor: Visitor) -> bool:
        """The page's session and the panels of this browser hold the session's cap (`admission.over_session_cap`)."""
        return admission.over_session_cap(self.store, visitor, self.limits)

    # ---- run events
    def show_tab(self, tab: str) -> Callable[..., dict[str, Any]]:
        """The handler for opening view tab `tab` (one per tab: each its own name in Gradio's event list); the
        page sends the order of the opening (`Visitor.open_tab`; a script's call may leave it out)."""
        def handler(sid: Any, layer: Any, head: Any, order: Any = None) -> dict[str, Any]:
            return self.open_tab(sid, tab, layer, head, order)
        handler.__name__ = f"show_{tab}"
        return handler

    def redraw_tab(self, tab: str) -> Callable[..., dict[str, Any]]:
        """The handler that draws view tab `tab` again after a change made inside it (the Routing view's layer,
        a head picked in the head atlas), leaving the page's open tab as it is."""
        def handler(sid: Any, layer: Any, head: Any) -> dict[str, Any]:
            return self.draw_tab(sid, tab, layer, head)
        handler.__name__ = f"redraw_{tab}"
        return handler

    @refuses
    def open_tab(self, sid: Any, tab: str, layer: Any, head: Any, order: Any = None) -> dict[str, Any]:
        """View tab `tab` was opened: remember it (unless the page opened another since) and draw its views now."""
        visitor = self.store.get(sid)
        if visitor is None:  # before the first Prefill: its views are drawn for this tab
            if isinstance(sid, str) and sid:
                self.store.remember_tab(sid, tab, order)
            return {}
        if not visitor.open_tab(tab, order):
            return {}  # a later opening's tab is open: that opening draws it
        return self.draw_tab(sid, tab, layer, head)

    @refuses
    def draw_tab(self, sid: Any, tab: str, layer: Any, head: Any) -> dict[str, Any]:
        """Draw view tab `tab`'s views now (with the token views), whichever tab is open."""
        visitor = self.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records or visitor.lock.locked():
            return {}  # no run yet, or playing: the next step draws the open tab
        views = self.views(visitor, layer, head, tab=tab)
        self.queue_forward_ahead(visitor)  # a view showing the lens needs it for the next step too
        return views

    def run_prefill(self, sid: Any, prompt: Any, chat: Any, system: Any, params: SamplingParams,
                    max_new: Any) -> tuple[str, Visitor]:
        """Start a new run with sampling parameters already parsed (a link's, a script's, a test's): `start`."""
        return self.start(sid, self.request(sid, prompt, chat, system, params.temperature, params.top_k, params.top_p,
                                            params.min_p, params.seed, max_new))

    def request(self, sid: Any, prompt: Any, chat: Any, system: Any, temperature: Any, top_k: Any, top_p: Any,
                min_p: Any, seed: Any, max_new: Any) -> Checked:
        """The run the Prefill's controls describe, with this browser session's settings panel, checked once."""
        visitor = self.store.get(sid)
        decoding = step_settings(visitor) if visitor is not None else DecodingSettings()
        return page_request(prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new, decoding)

    def start(self, sid: Any, checked: Checked) -> tuple[str, Visitor]:
        """Start the run `checked` describes for this browser session (raises InspectorError/ValueError). Every
        cap is checked before the prefill thread sees the request."""
        request = checked.request
        max_new = admission.admit_max_new(request.max_new_tokens, self.limits)
        admitted = admission.admit_prompt(self.loaded, self.limits, request.prompt, request.chat, request.system,
                                          store=self.store, sid=sid)
        sid, visitor = self.store.get_or_create(sid)
        with visitor.exclusive("prefill"):
            self.store.prefill_started(sid)
            self.store.reset_locked(visitor)
            # the request's session: the settings panel's penalties, bans, constraint; the request kept with it
            visitor.session = session_for(request, self.loaded, checked.settings, record=True)
            use_policy(visitor)  # the KV cache view's policy, if one was chosen
            visitor.max_new_tokens = max_new
            call_prefill(visitor.session.prefill_ids, admitted.ids, checked.params, max_new_tokens=max_new,
                         tokenize_ms=admitted.tokenize_ms, checked=True)  # `page_request` checked the params
            # its link and trace: the run's text, not the box's
            link_handlers.remember_run(visitor, request.prompt, request.chat, request.system)
        return sid, visitor

    @on_model_thread
    def run_step(self, sid: Any, params: SamplingParams) -> Visitor:
        """One decode step for this browser session (raises InspectorError/ValueError)."""
        visitor = self.need_session(sid)
        with visitor.exclusive("step"):
            self._one_step(visitor, params)
        return visitor

    @refuses(lead=keep_sid)
    def prefill(self, sid: Any, prompt: Any, chat: Any, system: Any, temperature: Any, top_k: Any, top_p: Any,
                min_p: Any, seed: Any, max_new: Any, layer: Any, head: Any, pinned: Any = False,
                position: Any = -1) -> tuple[Any, dict[str, Any]]:
        """Tokenize + one forward over the prompt + sample token 1 (replaces any previous run). With "pin" ticked
        (`pinned`), the selected `position` is selected in the new run before its views are drawn; one the run
        does not reach is named on the status line, and the newest position is selected."""
        message = ""
        try:
            checked = self.request(sid, prompt, chat, system, temperature, top_k, top_p, min_p, seed, max_new)
            sid, visitor = self.start(sid, checked)
            try:
                visitor.selected = pinned_position(pinned, position, visitor.newest_position())
            except InputError as exc:
                message = f"the pinned position was not kept, so the newest is selected: {exc}"
        finally:
            self.store.prefill_started(sid)  # refused or done: a Step waiting for it goes on
        views = self.views(visitor, layer, head, message, error=bool(message))
        self.queue_forward_ahead(visitor)
        return sid, views

    def ask_prefill(self, sid: Any, pinned: Any) -> tuple:
        """Prefill pressed (the first link of its chain, not queued): a Step or Play pressed before the prefill
        runs waits for it, and the status line says the prefill is coming; the selections start fresh unless
        pinned (`inspector.ui.selections`). Returns (layer, head, position, views)."""
        self.store.ask_prefill(sid)
        visitor = self.store.get(sid)
        status = self.render.status(visitor, "prefill: queued, running when the model is free", pending="prefill")
        return (*fresh_selections(pinned), {"status": status})

    def page_load(self) -> tuple[str, dict[str, Any]]:
        """A new page: its session id (no slot is taken until the first prefill) and every view blank."""
        return self.store.new_id(), self.render.blank_views()

    @on_model_thread
    def _one_step(self, visitor: Visitor, params: SamplingParams) -> None:
        s = visitor.session
        if s.finished:
            raise InputError(f"generation finished ({s.finished}): press Prefill to start again")
        if len(s.generated_ids) >= visitor.max_new_tokens:
            raise InputError("max new tokens reached")
        if self._over_memory_cap(visitor):
            raise InputError(f"memory cap reached: this session's KV cache and trace, with what its panels hold, fill "
                             f"the {self.limits.max_trace_mb} MiB this server allows (INSPECTOR_MAX_TRACE_MB); press "
                             "Prefill to start a new run")
        visitor.preview = None
        visitor.uncached_ms = None
        s.step(params)

    @refuses
    def step(self, sid: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any, layer: Any,
             head: Any) -> dict[str, Any]:
        """The Step button: one decode step (feed the last sampled token, sample the next) -> one update: status,
        tokens, text, the open tab's views and the hidden `drawn` marker. Usually the forward (with the
        commitment layer the chips show, and the whole logit lens when the open view shows it) already ran
        ahead (`queue_forward_ahead`), so this only samples and draws, and one update sent without Gradio's
        queue is the quickest way to the page (its script paints the token before it draws the plots;
        bench/ui.py compares)."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        self.store.wait_for_prefill(sid, PREFILL_WAIT_S)  # Step right after Prefill: steps the new run
        visitor = self.run_step(sid, params)
        views = {**self.views(visitor, layer, head), "drawn": self.render.drawn_marker(visitor)}
        self.queue_forward_ahead(visitor)
        return views

    @refuses
    def play(self, sid: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any, layer: Any, head: Any,
             speed: Any = None, fastest: Any = True) -> Iterator[dict[str, Any]]:
        """Stream decode steps until EOS / max tokens / context end / Pause (`inspector.ui.play`): status,
        tokens and text on every update, the open tab's plots at most every `PlayPace.plot_interval_s` (at max
        speed `PlayPace.max_speed_plot_interval_s`; always on the last step); at most `speed` steps a second
        unless `fastest` (the Speed control; a script's call without them: max), and at max speed at most
        `PlayPace.max_speed_update_s` between updates, each showing every token since the last, the steps
        never waiting for an update to be sent (`inspector.ui.play.unhindered`)."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        pace = PlayPace.of(speed, fastest)
        if self.store.prefill_coming(sid):
            yield {"status": self.render.status(self.store.get(sid), "Play starts when the prefill finishes")}
            self.store.wait_for_prefill(sid, PREFILL_WAIT_S)
        visitor = visitor_when_prefilled(self.store, sid)
        if visitor.activity == "prefill":
            yield {"status": self.render.status(visitor, "Play starts when the prefill finishes")}
        message = ""

        def updates() -> Iterator[dict[str, Any]]:
            for update in play_steps(visitor, lambda: self._advance(visitor, params), pace,
                                     check=lambda: self.need_session(sid)):
                # the update's views first, then the next forward (both on the model thread, in that order): the
                # forward runs while Gradio encodes and sends the update and Play paces
                views = self.views(visitor, layer, head, plots=update.plots) if update.send else None
                self._play_ahead(visitor)
                if views is not None:
                    yield views

        try:
            # at max speed the steps never wait for an update to be sent (`inspector.ui.play.unhindered`)
            yield from unhindered(updates) if pace.interval is None else updates()
        except InspectorError as exc:
            message = str(exc)
        if visitor.session is not None:
            views = self.views(visitor, layer, head, message or ("paused" if visitor.pause.is_set() else ""))
            self.queue_forward_ahead(visitor)
            yield views

    def _advance(self, visitor: Visitor, params: SamplingParams) -> bool:
        """One of Play's steps; True while the run can go on."""
        self._one_step(visitor, params)
        return visitor.session is not None and not visitor.session.finished

    def pause(self, sid: Any) -> None:
        """Pause: ask whatever this browser session plays (the page's run or a lab) to stop after its current
        step. Its own handler, never queued behind Play."""
        visitor = self.store.get(sid)
        if visitor is not None:
            visitor.pause.set()

    def reset(self, sid: Any, layer: Any, head: Any) -> dict[str, Any]:
        """Reset: a fresh session for this browser (Play stopped first), every view blank."""
        if self.store.get(sid) is not None:
            self.store.reset(sid)
        return self.render.blank_views("reset: ready for a new prompt", visitor=self.store.get(sid))

    # ---------- events without a forward ----------
    @refuses
    @on_model_thread
    def preview(self, sid: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any) -> dict[str, Any]:
        """A sampling control changed: redraw the newest step's distribution from its stored logits."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)  # a bad value is refused even before a run
        visitor = self.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records or visitor.lock.locked():
            return {}  # nothing to redraw yet, or playing: the next step redraws
        visitor.preview = visitor.session.preview_sample(params)
        visitor.new_version()
        return {**self.page.panels["sampling"].draw(visitor), "status": self.render.status(visitor)}

    @refuses
    @on_model_thread
    def resample(self, sid: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any, layer: Any,
                 head: Any) -> dict[str, Any]:
        """Re-draw the newest step's token from its stored logits with the current settings."""
        params = sampling_params(temperature, top_k, top_p, min_p, seed)
        visitor = self.need_session(sid)
        with visitor.exclusive("resample"):
            visitor.preview = None
            visitor.session.resample(params)
        views = self.views(visitor, layer, head, "resampled the newest token")
        self.queue_forward_ahead(visitor)
        return views

    @refuses
    @on_model_thread
    def select(self, sid: Any, position: Any, layer: Any, head: Any) -> dict[str, Any]:
        """A chip was clicked (or the position box, layer or head edited): redraw the position-dependent views.
        On the model thread, so an update drawn before the change (a tab's draw) is wholly older than it."""
        layer_bound(self.loaded.config).parse(layer)  # a box left empty or out of range is named at once
        head_bound(self.loaded.config).parse(head)
        visitor = self.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records:
            return {}
        pos = position_bound(visitor.newest_position()).parse(position)
        visitor.selected = None if pos < 0 else pos
        if visitor.lock.locked():
            return {}  # playing: the next step draws the selection
        visitor.new_version()
        return self.views(visitor, layer, head)


def _log_failure(done: Future) -> None:
    """A forward run ahead that failed is only logged: the next Step runs its own forward and says why."""
    if done.exception() is not None:
        log.warning("running the next forward ahead failed: %s", done.exception())
