"""Handlers and the visitor store without a browser, over a tiny model: caps, isolation, errors, play/pause."""

from __future__ import annotations

import re
import threading
import time
from html import escape

import pytest

from inspector.errors import InputError
from inspector.session.records import commitment_layer
from inspector.ui.handlers import PLOT_KEYS, TOKEN_KEYS, Handlers, sampling_params
from inspector.ui import model_thread
from inspector.ui.visitors import VisitorCapError
from tests.support.viz_records import tiny_loaded  # noqa: F401
from tests.support.handlers import SAMPLING, make, status


def test_sampling_params_messages():
    assert sampling_params(0.7, 5, 0.9, 0.05, 3).top_k == 5
    for bad, msg in [((-1, 0, 1, 0, 0), "temperature"), ((0, 0, 0, 0, 0), "top-p"), ((0, 2.5, 1, 0, 0), "whole"),
                     ((0, 0, 1, 1.0, 0), "min-p"), ((0, 0, 1, 0, None), "seed is empty"), (("x", 0, 1, 0, 0), "number"),
                     ((0, 0, 1, 0, -2), "seed must be a whole number >= 0")]:
        with pytest.raises(InputError, match=msg):
            sampling_params(*bad)


def test_prefill_step_and_errors_never_raise(tiny_loaded):
    h, store = make(tiny_loaded)
    out = h.step(None, *SAMPLING, 0, 0)
    assert "press Prefill first" in status(out)
    out = h.prefill(None, "", False, "", *SAMPLING, 4, 0, 0)
    assert "prompt is empty" in status(out[1:])
    sid, *views = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 3, 1, 3)
    assert 'data-phase="prefill done"' in status(views)
    assert "ii-error" not in status(views)
    assert "decode step 1 (token 2 of 3)" in status(h.step(sid, *SAMPLING, 1, 3))
    assert "finished: max tokens" in status(h.step(sid, *SAMPLING, 1, 3))  # token 3 of 3
    views = h.step(sid, *SAMPLING, 1, 3)
    assert "ii-error" in status(views) and "press Prefill to start again" in status(views)
    assert "ii-error" in status(h.prefill(sid, "x", False, "", *SAMPLING, "lots", 0, 0)[1:])
    assert "ii-error" in status(h.step(sid, 5.0, 0, 1.5, 0, 0, 0, 0))


def test_sessions_are_isolated_and_dropped(tiny_loaded):
    h, store = make(tiny_loaded)
    a = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    b = h.prefill(None, "Hello world", False, "", *SAMPLING, 8, 0, 0)[0]
    assert a != b and len(store) == 2
    h.step(a, *SAMPLING, 0, 0)
    assert len(store.get(a).session.records) == 2 and len(store.get(b).session.records) == 1
    store.drop(a)
    assert store.get(a) is None and len(store) == 1


def test_a_full_store_evicts_the_least_recently_used_idle_session_and_tells_its_owner(tiny_loaded):
    h, store = make(tiny_loaded, max_sessions=2)
    a = h.prefill(None, "Hello", False, "", *SAMPLING, 4, 0, 0)[0]
    b = h.prefill(None, "Hello there", False, "", *SAMPLING, 4, 0, 0)[0]
    h.step(a, *SAMPLING, 0, 0)  # a is now the more recently used
    c, *views = h.prefill(None, "A third visitor", False, "", *SAMPLING, 4, 0, 0)
    assert "ii-error" not in status(views) and len(store) == 2
    assert store.get(b) is None and store.get(a) is not None and store.get(c) is not None
    for out in (h.step(b, *SAMPLING, 0, 0), list(h.play(b, *SAMPLING, 0, 0))[-1]):
        assert "your session expired" in status(out) and "press Prefill" in status(out)
    again, *views = h.prefill(b, "I am back", False, "", *SAMPLING, 4, 0, 0)  # the owner starts over
    assert again == b and "ii-error" not in status(views) and store.get(a) is None  # a was least recent now


def test_the_session_cap_refuses_only_when_every_session_is_busy(tiny_loaded):
    h, store = make(tiny_loaded, max_sessions=1)
    sid = h.prefill(None, "Hello", False, "", *SAMPLING, 4, 0, 0)[0]
    with store.get(sid).exclusive("play"):  # busy: never evicted
        out = h.prefill(None, "Hello", False, "", *SAMPLING, 4, 0, 0)
        assert "INSPECTOR_MAX_SESSIONS" in status(out[1:]) and "\n" not in status(out[1:])
        with pytest.raises(VisitorCapError):
            store.get_or_create(None)
        assert "busy: playing" in status(h.step(sid, *SAMPLING, 0, 0))
    assert store.get(sid) is not None


def test_expired_sessions_are_evicted(tiny_loaded):
    h, store = make(tiny_loaded, max_sessions=1, session_ttl_s=0)
    first = h.prefill(None, "Hello", False, "", *SAMPLING, 4, 0, 0)[0]
    second = h.prefill(None, "Hello", False, "", *SAMPLING, 4, 0, 0)[0]
    assert second != first and store.get(first) is None
    assert "idle for more than 0 s" in status(h.step(first, *SAMPLING, 0, 0))


def test_an_asked_prefill_that_never_came_is_forgotten_with_the_idle_sessions(tiny_loaded):
    """A page closed between its Prefill click (the ask) and the queued prefill leaves no ask behind once
    the idle sessions are evicted."""
    _, store = make(tiny_loaded, session_ttl_s=0)
    store.ask_prefill("closed-page")
    assert store.prefill_coming("closed-page")
    time.sleep(0.01)
    store.get_or_create(None)  # a new visitor: idle sessions (and asks) are evicted first
    assert not store.prefill_coming("closed-page")


def test_max_new_tokens_capped_by_max_steps(tiny_loaded):
    h, _ = make(tiny_loaded, max_steps=5)
    views = h.prefill(None, "Hello", False, "", *SAMPLING, 6, 0, 0)[1:]
    assert "INSPECTOR_MAX_STEPS" in status(views)


def test_play_streams_until_pause(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 50, 0, 0)[0]
    gen = h.play(sid, *SAMPLING, 0, 0, 20, False)  # 20 steps a second: one update per step
    first = next(gen)
    assert "playing" in status(first)
    again = list(h.play(sid, *SAMPLING, 0, 0))  # Play while playing
    assert len(again) == 1 and "already playing" in status(again[0])
    assert "busy" in status(h.step(sid, *SAMPLING, 0, 0))
    next(gen)
    h.pause(sid)
    rest = list(gen)
    assert "paused" in status(rest[-1])
    n = len(store.get(sid).session.generated_ids)
    assert 3 <= n < 50
    assert "decode step" in status(h.step(sid, *SAMPLING, 0, 0))  # unlocked again


def test_preview_resample_select_recompute(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    h.step(sid, *SAMPLING, 0, 0)
    n = len(store.get(sid).session.generated_ids)
    info = h.preview(sid, 1.5, 3, 1.0, 0.0, 7)["samp_info"]
    assert 'data-preview="1"' in info and "temperature 1.5" in info
    assert len(store.get(sid).session.generated_ids) == n  # no new token
    views = h.show_tab("sampling")(sid, 0, 0)
    assert 'data-preview="1"' in views["samp_info"]
    views = h.resample(sid, 1.5, 3, 1.0, 0.0, 7, 0, 0)
    chosen = store.get(sid).session.generated_ids[-1]
    assert f'data-id="{chosen}"' in views["samp_info"]
    views = h.show_tab("residual")(sid, 0, 1)
    assert "attn_info" not in views  # only the open tab's views are drawn
    views = h.select(sid, 2, 0, 1)
    assert "Position 2 " in views["resid_pos"].layout.title.text
    views = h.show_tab("attention")(sid, 0, 1)  # only the open tab's views are drawn
    assert 'data-query="2"' in views["attn_info"]
    html = h.page.panels["kv"].recompute(sid)["kv_recompute"]
    assert "Without it" in html
    assert "ii-hit" in h.page.panels["inventory"].highlight("1")["inventory"]


def test_reset_gives_blank_views(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "Hello", False, "", *SAMPLING, 8, 0, 0)[0]
    views = h.reset(sid, 0, 0)
    assert 'data-phase="idle"' in status(views) and "reset" in status(views)
    assert not store.get(sid).session.records


def test_memory_cap_refuses_steps_and_prompts_with_a_message(tiny_loaded):
    probe, probe_store = make(tiny_loaded)
    from inspector.ui import model_thread

    sid = probe.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    session = probe_store.get(sid).session
    model_thread.settle()  # measure after the queued forward ahead (it counts too), every time
    after_prefill = session.retained_nbytes
    probe.step(sid, *SAMPLING, 0, 0)
    model_thread.settle()
    per_step = session.retained_nbytes - after_prefill
    assert per_step > 0 and 'id="status-memory"' in probe.render.status(probe_store.get(sid))

    h, store = make(tiny_loaded, max_trace_mb=(after_prefill + 1.5 * per_step) / 2**20)
    sid, *views = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)
    assert "ii-error" not in status(views)
    messages = [status(h.step(sid, *SAMPLING, 0, 0)) for _ in range(4)]
    assert "ii-error" not in messages[0]
    refused = [m for m in messages if "INSPECTOR_MAX_TRACE_MB" in m]
    assert refused and "memory cap reached" in refused[0]
    n_records = len(store.get(sid).session.records)
    assert n_records == 1 + messages.index(refused[0])  # a refused step adds nothing

    small, _ = make(tiny_loaded, max_trace_mb=after_prefill / 2 / 2**20)
    views = small.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[1:]
    assert "INSPECTOR_MAX_TRACE_MB" in status(views) and "shorter prompt" in status(views)


def test_the_commitment_layer_is_computed_for_every_drawn_step_whatever_the_tab(tiny_loaded, monkeypatch):
    """The chips show each generated token's commitment layer on every tab; only the Residual tab computes the
    whole logit lens, and the commitment read from it is the one found without it."""
    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "0")  # the draw itself computes it, not a forward run ahead
    h, store = make(tiny_loaded)
    store.get_or_create("page")[1].tab = "timing"
    sid = h.prefill("page", "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    out = h.step(sid, *SAMPLING, 0, 0)
    records = store.get(sid).session.records
    assert all(r.commitment is not None and not r.logit_lens for r in records)
    assert out["chips"].count('class="ii-decided') == 2  # both generated tokens badged
    found = list(records[-1].commitment)
    views = h.show_tab("residual")(sid, 0, 0)
    L = tiny_loaded.config.num_hidden_layers
    assert len(records[-1].logit_lens) == L
    assert views["lens"].count("<tr>") == 1 + L  # header + layers
    top1 = [tops[0].id for tops in records[-1].logit_lens]
    assert found == [commitment_layer(top1), top1[-1]]


def test_decode_work_runs_on_the_decode_thread_whichever_thread_calls(tiny_loaded, monkeypatch):
    """Gradio calls handlers from many worker threads; torch must see only the model thread."""
    from inspector.session.session import Session

    seen = []
    real_step = Session.step

    def spy(self, params):
        seen.append(threading.current_thread().name)
        return real_step(self, params)

    monkeypatch.setattr(Session, "step", spy)
    h, _ = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    callers = [threading.Thread(target=h.step, args=(sid, *SAMPLING, 0, 0), name=f"worker-{i}") for i in range(3)]
    for t in callers:
        t.start()
        t.join()
    list(h.play(sid, *SAMPLING, 0, 0))
    assert len(seen) >= 4 and {name.split("_")[0] for name in seen} == {"inspector-model-decode"}


def test_step_updates_the_tokens_and_the_open_tab_at_once(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    store.get(sid).tab = "kv"
    out = h.step(sid, *SAMPLING, 0, 0)
    kv_slots = {s.key for s in h.page.panels["kv"].slots}
    assert set(out) == set(TOKEN_KEYS) | kv_slots | {"drawn"}  # the tokens and the open tab's views, at once
    assert "decode step 1" in out["status"] and isinstance(out["chips"], str) and isinstance(out["text"], str)
    kv = out["kv_bars"]
    n = len(store.get(sid).session.prompt_ids) + 1
    assert f"{n} entries each" in kv.layout.title.text  # the KV view of the new step
    assert "timing_fig" not in out and set(PLOT_KEYS) > kv_slots  # closed tabs are skipped
    assert 'data-step="1" data-tab="kv"' in out["drawn"]
    out = h.step(None, *SAMPLING, 0, 0)  # no session: the message, nothing else
    assert "press Prefill first" in out["status"] and set(out) == {"status"}


def test_a_tab_opened_before_the_first_prefill_is_the_one_its_views_are_drawn_for(tiny_loaded):
    """A page opens a view tab before any Prefill (its id has no visitor yet): the prefill draws that tab."""
    h, store = make(tiny_loaded)
    sid = store.new_id()
    assert h.open_tab(sid, "kv", 0, 0) == {} and store.get(sid) is None  # nothing to draw, no slot taken
    out = h.prefill(sid, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[1]
    assert store.get(sid).tab == "kv"
    kv_slots = {s.key for s in h.page.panels["kv"].slots}
    residual_slots = {s.key for s in h.page.panels["residual"].slots}
    assert kv_slots <= set(out) and not residual_slots & set(out)  # the open tab's views, not Residual's
    other = h.prefill(store.new_id(), "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    assert store.get(other).tab == "residual"  # a page that opened none starts on the first tab


def test_tab_openings_answered_out_of_order_leave_the_newest_tab_open(tiny_loaded):
    """Gradio may run two tab openings' handlers in either order: the page numbers its openings, an older
    opening answered last draws nothing and leaves the newer tab open, so a Step draws the tab on screen."""
    h, store = make(tiny_loaded)
    sid = store.new_id()
    h.show_tab("kv")(sid, 0, 0, 2)  # before the first Prefill: remembered for the visitor to come
    h.show_tab("sampling")(sid, 0, 0, 1)
    h.prefill(sid, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)
    assert store.get(sid).tab == "kv"
    timing = h.show_tab("timing")(sid, 0, 0, 4)  # the page opened Attention (3), then Timing (4) ...
    assert "timing_fig" in timing
    late = h.show_tab("attention")(sid, 0, 0, 3)  # ... and Attention's handler ran last
    assert late == {} and store.get(sid).tab == "timing"
    step = h.step(sid, *SAMPLING, 0, 0)
    assert "timing_fig" in step and "attn_fig" not in step and 'data-tab="timing"' in step["drawn"]
    assert "attn_fig" in h.show_tab("attention")(sid, 0, 0)  # a script's opening (no order) is always taken
    redrawn = h.redraw_tab("residual")(sid, 0, 0)
    assert "resid_pos" in redrawn and store.get(sid).tab == "attention"  # a redraw leaves the open tab as it is


def test_decode_steps_use_the_decode_thread_count_prefill_keeps_every_thread(tiny_loaded, monkeypatch):
    """Decode runs on the decode thread with `decode_threads()` torch threads (one fewer than torch has, or
    the env value), prefill on the prefill thread with every thread; no model call changes a thread's count
    (set_num_threads resizes OpenMP teams, recreates thread pools and clears oneDNN's primitive cache)."""
    import torch

    from inspector.session.session import Session
    from inspector.ui import model_thread

    counts = {}
    real_step, real_prefill = Session.step, Session.prefill_ids

    def spy_step(self, params):
        counts.setdefault("step", []).append(torch.get_num_threads())
        return real_step(self, params)

    def spy_prefill(self, *args, **kwargs):
        counts.setdefault("prefill", []).append(torch.get_num_threads())
        return real_prefill(self, *args, **kwargs)

    real_ahead = Session.forward_ahead

    def spy_ahead(self, **kwargs):
        counts.setdefault("ahead", []).append(torch.get_num_threads())
        return real_ahead(self, **kwargs)

    monkeypatch.setattr(Session, "step", spy_step)
    monkeypatch.setattr(Session, "prefill_ids", spy_prefill)
    switches = []
    real_set = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (switches.append(n), real_set(n)))
    monkeypatch.setattr(Session, "forward_ahead", spy_ahead)
    full = model_thread.ALL_THREADS
    monkeypatch.setenv("INSPECTOR_DECODE_THREADS", "3" if full != 3 else "2")
    h, _ = make(tiny_loaded)
    assert h.decode_threads == (3 if full != 3 else 2)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    h.step(sid, *SAMPLING, 0, 0)
    model_thread.settle()  # the forward queued ahead runs before Play takes the session
    list(h.play(sid, *SAMPLING, 0, 0))
    h.prefill(sid, "Again", False, "", *SAMPLING, 8, 0, 0)
    model_thread.settle()  # the queued forwards ahead have run
    assert set(counts["step"]) == {h.decode_threads} and len(counts["step"]) >= 2
    assert set(counts["ahead"]) == {h.decode_threads} and len(counts["ahead"]) >= 3
    assert counts["prefill"] == [full, full]
    assert model_thread.call(torch.get_num_threads) == h.decode_threads
    assert model_thread.call_prefill(torch.get_num_threads) == full
    assert len(switches) <= 2  # at most once per new model thread, when it starts


def test_decode_threads_default_and_bad_values(monkeypatch):
    import torch

    from inspector.errors import InputError
    from inspector.ui.model_thread import decode_threads

    monkeypatch.delenv("INSPECTOR_DECODE_THREADS", raising=False)
    assert decode_threads() == max(1, torch.get_num_threads() - 1)
    monkeypatch.setenv("INSPECTOR_DECODE_THREADS", "1")
    assert decode_threads() == 1
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv("INSPECTOR_DECODE_THREADS", bad)
        with pytest.raises(InputError, match="INSPECTOR_DECODE_THREADS must be a positive integer"):
            decode_threads()


def test_the_logit_lens_runs_ahead_with_the_forward_on_the_residual_tab(tiny_loaded, monkeypatch):
    """The lens (an LM-head matmul per layer) runs ahead with the next forward on the Residual tab, its
    commitment layer (the chips' badge) on every tab; Step shows the lens on the Residual tab either way."""
    from inspector.session.session import Session
    from inspector.ui import model_thread

    asked = []
    real_ahead = Session.forward_ahead

    def spy_ahead(self, lens=False, commitment=False, overview=False):
        asked.append((lens, commitment, overview))
        return real_ahead(self, lens=lens, commitment=commitment, overview=overview)

    monkeypatch.setattr(Session, "forward_ahead", spy_ahead)
    for run_ahead in ("0", "1"):
        monkeypatch.setenv("INSPECTOR_RUN_AHEAD", run_ahead)
        asked.clear()
        h, store = make(tiny_loaded)
        sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]  # Residual tab
        model_thread.settle()
        h.show_tab("attention")(sid, 0, 0)
        h.step(sid, *SAMPLING, 0, 0)  # step 1; step 2's forward runs ahead with its lens
        model_thread.settle()
        h.show_tab("residual")(sid, 0, 0)  # ... which the Residual tab now shows
        model_thread.settle()
        for k in (2, 3):
            out = h.step(sid, *SAMPLING, 0, 0)
            model_thread.settle()
            assert out["lens"].count("<tr>") == 1 + tiny_loaded.config.num_hidden_layers
            assert f'data-step="{k}" data-tab="residual"' in out["drawn"]
        # the whole lens runs ahead on the Residual tab, every head's attention row on the Attention tab, the
        # commitment layer on every tab
        tabs = ("residual", "attention", "attention", "residual", "residual", "residual")
        assert asked == ([(tab == "residual", True, tab == "attention") for tab in tabs] if run_ahead == "1" else [])


def test_each_shown_token_queues_the_next_forward_and_step_uses_it(tiny_loaded, monkeypatch):
    """Prefill, Step, Resample and the end of Play queue the next decode forward on the model thread; the
    next Step commits it instead of running its own; the tokens equal those of an app that does not run
    ahead (INSPECTOR_RUN_AHEAD=0)."""
    from inspector.session.session import Session
    from inspector.ui import model_thread

    forwards = []
    real_forward = Session._forward

    def spy_forward(self, kind, token_ids, cached):
        forwards.append((kind, threading.current_thread().name))
        return real_forward(self, kind, token_ids, cached)

    monkeypatch.setattr(Session, "_forward", spy_forward)
    sampled = (1.2, 0, 1.0, 0.0, 5)

    def session_after(h, sid):
        model_thread.settle()  # wait for what the handlers queued
        return h.store.get(sid).session

    texts = {}
    for run_ahead in ("1", "0"):
        monkeypatch.setenv("INSPECTOR_RUN_AHEAD", run_ahead)
        h, _ = make(tiny_loaded)
        assert h.run_ahead is (run_ahead == "1")
        forwards.clear()
        sid = h.prefill(None, "The quick brown fox", False, "", *sampled, 12, 0, 0)[0]
        assert session_after(h, sid).is_ahead is h.run_ahead
        for _ in range(3):
            h.step(sid, *sampled, 0, 0)
            assert session_after(h, sid).is_ahead is h.run_ahead
        h.resample(sid, 2.0, 0, 1.0, 0.0, 9, 0, 0)
        assert session_after(h, sid).is_ahead is h.run_ahead
        h.step(sid, *sampled, 0, 0)
        list(h.play(sid, *sampled, 0, 0))
        s = session_after(h, sid)
        assert s.finished == "max_tokens" and not s.is_ahead
        texts[run_ahead] = (s.generated_ids, [r.token_ids for r in s.records])
        decodes = [name for kind, name in forwards if kind == "decode"]
        # every forward ran on the model thread, one per step; running ahead adds the one dropped by resample
        assert len(decodes) == len(s.records) - 1 + (1 if h.run_ahead else 0)
        assert all(name.startswith(model_thread.THREAD_NAME) for name in decodes)
    assert texts["1"] == texts["0"]


def test_play_steps_commit_the_forward_run_ahead_while_the_last_step_was_sent(tiny_loaded, monkeypatch):
    """During Play each step's views are built, then the next forward is queued before the update is sent:
    every Play step after the first finds its forward already run."""
    from inspector.session.session import Session

    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "1")
    h, _ = make(tiny_loaded)
    ahead_at_step = []
    real_step = Session.step

    def spy_step(self, params):
        ahead_at_step.append(self.is_ahead)
        return real_step(self, params)

    sid = h.prefill(None, "The quick brown fox", False, "", 1.0, 0, 1.0, 0.0, 3, 8, 0, 0)[0]
    model_thread.settle()
    monkeypatch.setattr(Session, "step", spy_step)
    list(h.play(sid, 1.0, 0, 1.0, 0.0, 3, 0, 0))
    assert len(ahead_at_step) == 7 and all(ahead_at_step)  # 7 steps to max_new 8


def test_play_at_max_speed_updates_the_page_at_most_10_times_a_second_and_shows_every_token(tiny_loaded):
    """The tiny model steps far faster than 10 a second: at "max" the page gets fewer updates than steps,
    each showing every token so far, the last one the final token; at a set speed every step is an update."""
    from inspector.ui.play import MAX_SPEED_UPDATE_S

    h, _ = make(tiny_loaded)
    counts = {}
    for speed, fastest in ((None, True), (20, False)):
        sid = h.prefill(None, "The quick brown fox", False, "", 1.0, 0, 1.0, 0.0, 3, 12, 0, 0)[0]
        t0 = time.monotonic()
        updates = list(h.play(sid, 1.0, 0, 1.0, 0.0, 3, 0, 0, speed, fastest))
        elapsed = time.monotonic() - t0
        session = h.store.get(sid).session
        assert len(session.generated_ids) == 12
        texts = [u["text"] for u in updates]
        assert texts[-2] == texts[-1] and escape(session.text.split()[-1]) in texts[-1]  # the last step, then the end
        counts[fastest] = len(updates)
        if fastest:
            assert len(updates) <= elapsed / MAX_SPEED_UPDATE_S + 3  # + the first step, the last, the end
    assert counts[True] < 11 + 1 == counts[False]  # 11 steps after the prefill's token, then the end


def test_a_delayed_submission_runs_on_the_decode_thread_after_its_delay():
    ran = []
    t0 = time.monotonic()
    model_thread.submit_after(0.05, lambda: ran.append((time.monotonic() - t0, threading.current_thread().name)))
    assert ran == []
    model_thread.settle()
    assert len(ran) == 1 and ran[0][0] >= 0.05 and ran[0][1].startswith(model_thread.THREAD_NAME)


def test_run_ahead_setting(monkeypatch):
    from inspector.errors import InputError
    from inspector.ui.app_model import run_ahead_enabled

    for raw, on in ((None, True), ("", True), ("1", True), ("0", False)):
        if raw is None:
            monkeypatch.delenv("INSPECTOR_RUN_AHEAD", raising=False)
        else:
            monkeypatch.setenv("INSPECTOR_RUN_AHEAD", raw)
        assert run_ahead_enabled() is on
    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "yes")
    with pytest.raises(InputError, match="INSPECTOR_RUN_AHEAD must be 0 or 1"):
        run_ahead_enabled()


def test_a_failed_forward_ahead_is_logged_and_step_runs_its_own(tiny_loaded, monkeypatch, caplog):
    from inspector.session.session import Session
    from inspector.ui import model_thread

    def broken(self, lens=False, commitment=False, overview=False):
        raise RuntimeError("out of memory")

    monkeypatch.setenv("INSPECTOR_RUN_AHEAD", "1")
    monkeypatch.setattr(Session, "forward_ahead", broken)
    h, store = make(tiny_loaded)
    with caplog.at_level("WARNING", logger="inspector.ui.handlers"):
        sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
        model_thread.settle()
    assert "running the next forward ahead failed: out of memory" in caplog.text
    out = h.step(sid, *SAMPLING, 0, 0)
    assert "decode step 1" in status(out) and "ii-error" not in status(out)


def version(out) -> int:
    return int(re.search(r'data-version="(\d+)"', status(out)).group(1))


def test_every_update_names_the_state_it_shows_and_a_later_state_has_a_larger_number(tiny_loaded):
    """A sampling preview computed before a Step carries an older version than the Step's update, so the page
    drops its views if it arrives after (answers of queued and unqueued events can cross). A preview and a
    selection change what the views show: a tab drawn before them is older than their update."""
    h, store = make(tiny_loaded)
    sid, views = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)
    after_prefill = version(views)
    preview = h.preview(sid, 1.5, 3, 1.0, 0.0, 7)
    assert version(preview) > after_prefill
    tab = h.open_tab(sid, "residual", 0, 0)
    assert version(tab) == version(preview)  # drawing a tab changes nothing the views show
    selected = h.select(sid, 2, 0, 0)
    assert version(selected) > version(tab) and re.search(r'ii-selected" data-pos="2"', selected["chips"])
    assert version(h.select(sid, 2, 1, 0)) > version(selected)  # another layer
    stepped = h.step(sid, *SAMPLING, 0, 0)
    assert version(stepped) > version(preview)
    refused = h.step(sid, 5.0, 0, 1.5, 0, 0, 0, 0)  # a refusal shows the state as it is
    assert version(refused) == version(stepped)
    reset = h.reset(sid, 0, 0)
    assert version(reset) > version(stepped)
    other, views = h.prefill(None, "Hello", False, "", *SAMPLING, 8, 0, 0)
    assert version(views) > version(reset)  # one counter for every session


def test_an_update_drawn_while_the_prefill_was_coming_is_older_than_the_prefills_answer(tiny_loaded):
    """Prefill asked, a view drawn meanwhile (a Step's or a preview's: "prefill: waiting"), then the prefill runs
    or is refused: its answer carries a newer version, so the page keeps it whichever arrives last. A refused
    prefill changes nothing else; its answer tied with the "waiting" one, and the page, taking the later of
    equal versions, could read "prefill: waiting" for good when the two answers crossed (seen under load)."""
    h, store = make(tiny_loaded)
    sid, _ = h.prefill(None, "An old run", False, "", *SAMPLING, 8, 0, 0)
    for prompt, said in ((" ", "prompt is empty"), ("A new run", "prefill done")):
        asked = h.ask_prefill(sid, False)[-1]
        drawn = h.preview(sid, 1.5, 3, 1.0, 0.0, 7)
        assert "prefill: waiting" in status(drawn) and version(drawn) >= version(asked)
        answer = h.prefill(sid, prompt, False, "", *SAMPLING, 8, 0, 0)
        assert said in status(answer) and "waiting" not in status(answer)
        assert version(answer) > version(drawn)


def test_a_step_pressed_before_the_asked_prefill_runs_steps_the_new_run(tiny_loaded):
    """Prefill then Step at once: the prefill waits in Gradio's queue while the unqueued Step arrives first.
    The Step waits for the prefill the page asked for and steps the new run (before, it stepped or was refused
    on the old run, and the new prefill's "prefill done" then hid it: the Step never landed)."""
    h, store = make(tiny_loaded)
    sid, _ = h.prefill(None, "An old run", False, "", *SAMPLING, 8, 0, 0)
    h.step(sid, *SAMPLING, 0, 0)
    layer, head, position, asked = h.ask_prefill(sid, False)
    assert (layer, head, position) == (0, 0, -1) and "prefill: waiting" in status(asked)
    assert "prefill: waiting" in status(h.preview(sid, 1.5, 3, 1.0, 0.0, 7))  # a view drawn meanwhile says so
    stepped = []
    stepper = threading.Thread(target=lambda: stepped.append(h.step(sid, *SAMPLING, 0, 0)))
    stepper.start()
    time.sleep(0.3)
    assert stepper.is_alive() and not stepped  # waiting for the asked prefill
    _, views = h.prefill(sid, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)
    stepper.join(10)
    s = store.get(sid).session
    assert "decode step 1 (token 2 of 8)" in status(stepped[0]) and version(stepped[0]) > version(views)
    assert s.prompt_ids == tiny_loaded.tokenizer.prompt_ids("The quick brown fox", False) and len(s.records) == 2
    # a refused prefill releases a waiting Step too
    h.ask_prefill(sid, False)
    assert "prompt is empty" in status(h.prefill(sid, " ", False, "", *SAMPLING, 8, 0, 0))
    assert "decode step 2" in status(h.step(sid, *SAMPLING, 0, 0))
