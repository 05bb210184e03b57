"""Every cap is checked before any model work; Play pressed during a prefill waits for it."""

from __future__ import annotations

import threading
import time

import pytest

from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.ui import admission, model_thread
from inspector.ui.app_model import AppLimits
from inspector.ui.labs.speculative import SpeculativeState
from tests.support.handlers import SAMPLING, make, status
from tests.support.viz_records import tiny_loaded  # noqa: F401


def block_model_threads() -> threading.Event:
    """Occupy both model threads until the returned event is set (a long prefill of another visitor)."""
    release = threading.Event()
    model_thread.submit(release.wait)  # the decode thread holds the torch lock: the prefill thread waits too
    return release


def test_refused_prompts_never_reach_the_model_and_do_not_wait_for_it(tiny_loaded, monkeypatch):
    from inspector.session.session import Session

    calls = []
    monkeypatch.setattr(Session, "prefill_ids", lambda self, *a, **k: calls.append(a))
    h, store = make(tiny_loaded, max_prompt_tokens=20, max_steps=8)
    context = tiny_loaded.config.max_position_embeddings
    cases = {
        "x " * 40: "this server allows 20",  # tokens over the cap
        "y" * (20 * admission.MAX_CHARS_PER_TOKEN + 1): "characters",  # refused before tokenizing
        "   \n\t": "prompt is empty",
    }
    release = block_model_threads()
    try:
        for prompt, message in cases.items():
            t0 = time.perf_counter()
            out = h.prefill(None, prompt, False, "", *SAMPLING, 4, 0, 0)
            assert time.perf_counter() - t0 < 5  # the model threads are blocked: it did not queue behind them
            assert message in status(out[1:]) and "ii-error" in status(out[1:])
        out = h.prefill(None, "Hello", False, "", *SAMPLING, 9, 0, 0)
        assert "INSPECTOR_MAX_STEPS" in status(out[1:])
    finally:
        release.set()
    assert calls == [] and len(store) == 0  # no model call, no slot taken

    wide, _ = make(tiny_loaded, max_prompt_tokens=10 * context)
    out = wide.prefill(None, "z " * context, False, "", *SAMPLING, 4, 0, 0)
    assert f"context window is {context} tokens" in status(out[1:]) and calls == []


def test_the_memory_cap_refuses_a_prompt_before_its_prefill(tiny_loaded, monkeypatch):
    from inspector.session.session import Session

    prompt = "The quick brown fox jumps over the lazy dog " * 4
    n = len(tiny_loaded.tokenizer.encode(prompt))
    elem = tiny_loaded.model.model.embed_tokens.weight.element_size()
    need = admission.estimated_retained_nbytes(tiny_loaded.config, elem, n)
    calls = []
    real = Session.prefill_ids
    monkeypatch.setattr(Session, "prefill_ids", lambda self, *a, **k: (calls.append(a), real(self, *a, **k))[1])
    h, _ = make(tiny_loaded, max_trace_mb=need * 0.9 / 2**20)
    assert "INSPECTOR_MAX_TRACE_MB" in status(h.prefill(None, prompt, False, "", *SAMPLING, 4, 0, 0)[1:])
    assert calls == []
    h, _ = make(tiny_loaded, max_trace_mb=need * 1.5 / 2**20)
    assert "ii-error" not in status(h.prefill(None, prompt, False, "", *SAMPLING, 4, 0, 0)[1:])
    assert len(calls) == 1


@pytest.mark.parametrize("n_prompt,n_steps", [(5, 0), (40, 3), (200, 10)])
def test_the_memory_estimate_matches_what_a_session_holds(tiny_loaded, n_prompt, n_steps):
    from inspector.session.session import Session

    s = Session(tiny_loaded, lens=False)
    params = SamplingParams()
    s.prefill_ids([5 + i % 50 for i in range(n_prompt)], params, max_new_tokens=n_steps + 1)
    for _ in range(n_steps):
        s.step(params)
    elem = tiny_loaded.model.model.embed_tokens.weight.element_size()
    assert admission.estimated_retained_nbytes(tiny_loaded.config, elem, n_prompt, n_steps) == s.retained_nbytes


@pytest.mark.slow
def test_the_memory_estimate_matches_a_long_prompt_on_the_default_model(default_model):
    """Prompts of 512+ tokens keep their queries in fp16: the estimate follows."""
    from inspector.session.session import Session

    s = Session(default_model, lens=False)
    s.prefill_ids([100 + i % 1000 for i in range(600)], SamplingParams(), max_new_tokens=4)
    s.step(SamplingParams())
    elem = default_model.model.model.embed_tokens.weight.element_size()
    assert admission.estimated_retained_nbytes(default_model.config, elem, 600, 1) == s.retained_nbytes


def test_max_new_tokens_values():
    limits = AppLimits(max_steps=8)
    assert admission.admit_max_new("4", limits) == 4 and admission.admit_max_new(8.0, limits) == 8
    for bad, message in [(0, "> 0"), (-3, "> 0"), (9, "capped at 8"), ("many", "whole number"),
                         (2.5, "whole number"), (float("nan"), "whole number"), (float("inf"), "whole number"),
                         (None, "whole number")]:
        with pytest.raises(InputError, match=message):
            admission.admit_max_new(bad, limits)


def test_play_pressed_during_a_prefill_starts_when_it_finishes(tiny_loaded, monkeypatch):
    from inspector.session.session import Session

    started, release = threading.Event(), threading.Event()
    real = Session.prefill_ids

    def slow_prefill(self, *args, **kwargs):
        started.set()
        release.wait(10)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "prefill_ids", slow_prefill)
    h, store = make(tiny_loaded)
    sid = h.page_load()[0]  # the page's id, known before the first prefill returns
    loaded_id, views = h.page_load()
    assert set(views) == set(h.render.view_keys) and store.get(sid) is None and loaded_id != sid
    prefill = threading.Thread(target=h.prefill, args=(sid, "The quick brown fox", False, "", *SAMPLING, 4, 0, 0))
    prefill.start()
    assert started.wait(10)
    play = h.play(sid, *SAMPLING, 0, 0)
    first = next(play)
    assert "Play starts when the prefill finishes" in status(first) and "ii-error" not in status(first)
    release.set()
    rest = list(play)
    prefill.join()
    assert "finished: max tokens" in status(rest[-1])
    assert len(store.get(sid).session.generated_ids) == 4


def test_play_pressed_together_with_prefill_waits_for_it_to_start(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = h.page_load()[0]
    play_out = []
    player = threading.Thread(target=lambda: play_out.extend(h.play(sid, *SAMPLING, 0, 0)))
    player.start()  # Play's event reached the server just before Prefill's
    time.sleep(0.1)
    h.prefill(sid, "The quick brown fox", False, "", *SAMPLING, 3, 0, 0)
    player.join(30)
    assert play_out and "finished: max tokens" in status(play_out[-1])
    alone = list(h.play(h.page_load()[0], *SAMPLING, 0, 0))  # nothing to play: one clear message
    assert len(alone) == 1 and "press Prefill first" in status(alone[0])


def test_a_refused_prompt_keeps_the_run_the_visitor_had(tiny_loaded):
    h, store = make(tiny_loaded, max_prompt_tokens=20)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 8, 0, 0)[0]
    h.step(sid, *SAMPLING, 0, 0)
    before = list(store.get(sid).session.generated_ids)
    out = h.prefill(sid, "x " * 40, False, "", *SAMPLING, 8, 0, 0)
    assert out[0] == sid and "this server allows 20" in status(out[1:])
    assert store.get(sid).session.generated_ids == before
    assert "decode step 2" in status(h.step(sid, *SAMPLING, 0, 0))  # the run goes on


# ---- the labs' memory: per session, and the shared models once for the server ------------------------------

PROMPT = "The quick brown fox jumps over the lazy dog"


def prefilled(h) -> str:
    """A new browser session after a prefill, its forward run ahead already done (so it holds still)."""
    sid = h.prefill(None, PROMPT, False, "", *SAMPLING, 4, 0, 0)[0]
    model_thread.settle()  # the forward run ahead (queued after a delay) has run: the session holds still
    return sid


def speculative_run(loaded, drafter: str, max_new: int):
    """A finished Speculative lab run over `PROMPT`, as the tab keeps it."""
    from inspector.speculative.decoding import SpeculativeDecoder
    from inspector.speculative.drafters import make_drafter

    run = SpeculativeDecoder(loaded, make_drafter(drafter, loaded.model), 3, SamplingParams(), max_new_tokens=max_new)
    run.prefill(loaded.tokenizer.encode(PROMPT))
    list(run.play())
    return run


@pytest.mark.parametrize("drafter, layers", [("early-exit:1", 1), ("ngram", 0)])
def test_a_speculative_run_adds_what_it_holds_to_its_session(tiny_loaded, drafter, layers):
    h, store = make(tiny_loaded)
    sid = prefilled(h)
    visitor = store.get(sid)
    page = visitor.session.retained_nbytes
    assert admission.held_nbytes(visitor) == {admission.SESSION: page}

    run = speculative_run(tiny_loaded, drafter, max_new=20)
    visitor.labs["speculative"] = SpeculativeState(run)
    measured = run.cache.allocated_nbytes + (run.drafter.cache.allocated_nbytes if layers else 0)
    held = admission.held_nbytes(visitor)
    assert held == {admission.SESSION: page, "speculative": measured} and sum(held.values()) == page + measured
    # predicted before Start: the target's cache of every layer plus the drafter's of its first L layers
    cfg, elem = tiny_loaded.config, tiny_loaded.model.model.embed_tokens.weight.element_size()
    n = len(run.prompt_ids)
    per_layer = 2 * cfg.num_key_value_heads * cfg.head_dim * elem * 256  # one allocation step holds the run
    assert admission.estimated_speculative_nbytes(cfg, elem, n, 20, admission.draft_layers(run.drafter)) \
        == measured == per_layer * (cfg.num_hidden_layers + layers)


def test_the_labs_count_against_the_session_cap(tiny_loaded):
    h, store = make(tiny_loaded)
    sid = prefilled(h)
    visitor = store.get(sid)
    page = visitor.session.retained_nbytes
    cfg, elem = tiny_loaded.config, tiny_loaded.model.model.embed_tokens.weight.element_size()
    n = len(tiny_loaded.tokenizer.encode(PROMPT))
    spec = admission.estimated_speculative_nbytes(cfg, elem, n, 20, 1)
    # room for the page's session alone, not for it and a speculative run
    limits = AppLimits(max_trace_mb=(page + spec / 2) / 2**20)
    with pytest.raises(InputError, match="INSPECTOR_MAX_TRACE_MB") as exc:
        admission.admit_memory(store, sid, limits, "speculative", spec)
    assert "session" in str(exc.value)
    admission.admit_memory(store, sid, AppLimits(max_trace_mb=(page + spec * 2) / 2**20), "speculative", spec)
    # once the run is held, the page's next prefill counts it too
    visitor.labs["speculative"] = SpeculativeState(speculative_run(tiny_loaded, "early-exit:1", 20))
    assert not admission.over_session_cap(store, visitor, AppLimits(max_trace_mb=(page + spec) * 1.01 / 2**20))
    assert admission.over_session_cap(store, visitor, limits)
    with pytest.raises(InputError, match="speculative"):
        admission.admit_prompt(tiny_loaded, limits, PROMPT, False, "", store=store, sid=sid)
    admission.admit_prompt(tiny_loaded, limits, PROMPT, False, "")  # without the store: the page alone fits
    # a new prompt replaces the page's own part, so it is not counted twice
    admission.admit_memory(store, sid, AppLimits(max_trace_mb=(page + spec) * 1.01 / 2**20), admission.SESSION, page)


def test_shared_quant_models_count_once_for_the_server(tiny_loaded):
    from inspector.quant.lab import QuantLab

    h, store = make(tiny_loaded, max_sessions=2)
    sids = [prefilled(h) for _ in range(2)]
    held = [sum(admission.held_nbytes(store.get(s)).values()) for s in sids]
    lab = store.shared["quant"] = QuantLab(tiny_loaded)
    assert admission.process_nbytes(store) == 0  # nothing built yet
    planned = admission.planned_quant_nbytes(tiny_loaded, "int8")
    lab.model("int8")
    built = lab.extra_bytes
    assert admission.process_nbytes(store) == built > 0  # counted once, not per session
    # the plan bounds the build from above by what the model shares with fp32 (norm weights, RoPE table)
    shared = sum(p.nbytes for p in tiny_loaded.model.parameters() if p.dim() == 1) + tiny_loaded.model.inv_freq.nbytes
    assert planned - built == shared
    assert admission.planned_quant_nbytes(tiny_loaded, "fp32") == 0

    # each session's cap loses half of the shared models (two slots); the server's total stays in its cap
    roomy = AppLimits(max_sessions=2, max_trace_mb=(max(held) + 2 * built) / 2**20)
    assert admission.session_cap_bytes(store, roomy) == roomy.max_trace_mb * 2**20 - built // 2
    assert 2 * admission.session_cap_bytes(store, roomy) + built <= admission.server_cap_bytes(roomy)
    admission.admit_process_memory(store, roomy, planned)  # another model fits beside the two sessions
    tight = AppLimits(max_sessions=2, max_trace_mb=(max(held) + built / 4) / 2**20)
    with pytest.raises(InputError, match="the server is full"):  # both sessions already hold past the new cap
        admission.admit_process_memory(store, tight, planned)
    # a session that fits max_trace_mb alone is refused once the shared models take their share
    fits_alone = AppLimits(max_sessions=2, max_trace_mb=(held[0] + built / 4) / 2**20)
    del store.shared["quant"]
    admission.admit_memory(store, None, fits_alone, admission.SESSION, held[0])
    store.shared["quant"] = lab
    with pytest.raises(InputError, match="less .* for the labs' shared models"):
        admission.admit_memory(store, None, fits_alone, admission.SESSION, held[0])


def test_the_cap_read_before_every_step_counts_each_thing_once(tiny_loaded, monkeypatch):
    """The cap is read before every decode step: the shared models are counted once per model built and each
    forward's bytes once, however many steps read them (counting them afresh each step took a quarter of
    Play's time holding the GIL)."""
    from inspector.quant.lab import QuantLab
    from inspector.session.trace_store import Forward

    h, store = make(tiny_loaded)
    sid = prefilled(h)
    lab = store.shared["quant"] = QuantLab(tiny_loaded)
    counted = []
    count = QuantLab._own_bytes
    monkeypatch.setattr(QuantLab, "_own_bytes", lambda self, model: counted.append(1) or count(self, model))
    limits = AppLimits()
    for _ in range(5):
        admission.over_session_cap(store, store.get(sid), limits)
    assert admission.process_nbytes(store) == 0 and not counted  # nothing built: nothing walked
    lab.model("int8")
    for _ in range(5):
        admission.over_session_cap(store, store.get(sid), limits)
        assert admission.process_nbytes(store) == lab.extra_bytes > 0
    assert len(counted) == 1  # the model built was counted once, not on each read
    forward = store.get(sid).session.trace.forwards[0]
    fresh = Forward.nbytes.func(forward)
    assert forward.nbytes == fresh > 0 and "nbytes" in vars(forward)  # kept on the forward after the first read


def with_limits(h, limits):
    """The page's caps from now on (its panels and run read them from the page)."""
    h.page.limits = limits


def test_the_lab_tabs_admit_their_memory_with_the_page_session(tiny_loaded):
    """Start, Load and Run ask admission with what the browser's session and its other labs hold."""
    from inspector.session.budget import kv_bytes

    h, store = make(tiny_loaded)
    sid = prefilled(h)
    page = store.get(sid).session.retained_nbytes
    cfg, elem = tiny_loaded.config, tiny_loaded.model.model.embed_tokens.weight.element_size()
    n = len(tiny_loaded.tokenizer.encode(PROMPT))
    spec = admission.estimated_speculative_nbytes(cfg, elem, n, 8, 1)
    # a cap with room for the page's session, not for the run beside it: Start is refused by the session cap
    speculative, serving, quant = (h.page.panels[k] for k in ("speculative", "serving", "quant"))
    with_limits(h, AppLimits(max_trace_mb=(page + spec / 2) / 2**20))
    out = speculative.start(sid, "early-exit", 1, 2, PROMPT, False, "", 8, *SAMPLING)
    assert "INSPECTOR_MAX_TRACE_MB" in html_status(out) and "session" in html_status(out)
    assert "speculative" not in store.get(sid).labs or store.get(sid).labs["speculative"].run is None
    # with room, the run is held and counted for the session
    with_limits(h, AppLimits(max_trace_mb=(page + spec * 3) / 2**20))
    speculative.start(sid, "early-exit", 1, 2, PROMPT, False, "", 8, *SAMPLING)
    held = admission.held_nbytes(store.get(sid))
    assert 0 < held["speculative"] <= spec and held[admission.SESSION] == page  # the drafter fills its cache later
    # the Serving pool must fit beside both
    too_many = 3 * spec // kv_bytes(cfg, 4, elem) + 1  # blocks of 4 positions past the room left
    out = serving.load(sid, PROMPT, 2, 4, too_many, 1, False, "", 4, *SAMPLING)
    assert "INSPECTOR_MAX_TRACE_MB" in html_status(out) and "speculative" in html_status(out)
    serving.load(sid, PROMPT, 2, 4, 8, 1, False, "", 4, *SAMPLING)
    assert admission.held_nbytes(store.get(sid))["serving"] > 0
    # the Quantization lab's model is built only when the server has room, and then kept once for it
    with_limits(h, AppLimits(max_sessions=1, max_trace_mb=(sum(admission.held_nbytes(store.get(sid)).values()) + 1)
                             / 2**20))
    out = quant.compare(sid, "int8", "fp32", PROMPT, False, "", 2)
    assert "the server is full" in html_status(out) and not store.shared["quant"].built("int8")
    with_limits(h, AppLimits(max_trace_mb=64))
    quant.compare(sid, "int8", "fp32", PROMPT, False, "", 2)
    assert store.shared["quant"].built("int8") and admission.process_nbytes(store) > 0


def html_status(out) -> str:
    import html

    return html.unescape(out["status"])
