"""The guided tour's text, the precision notes, Play's pace, the system prompt note and fresh selections,
without a browser: over a tiny model's real records (and the real default model's template, marked slow)."""

from __future__ import annotations

import re
import threading
import time

import pytest

from inspector.engine.kv_cache import kv_bytes
from inspector.errors import InputError
from inspector.ui.play import step_interval, wait_for_pace
from inspector.ui.selections import FRESH, fresh_selections
from inspector.ui.system_prompt import TemplateSystem, system_note_html, template_system
from inspector.ui.tour_panel import tour_facts
from inspector.viz import kvcache as vk
from inspector.viz.glossary import GLOSSARY
from inspector.viz.pipeline import pipeline_html
from inspector.viz.precision import precision_note, quant_lab_note
from inspector.viz.tour import STEPS, VIEW_STEP, TourFacts, tour_html
from tests.support.handlers import SAMPLING, make
from tests.support.viz_records import tiny_loaded, tiny_run  # noqa: F401
from tests.support.viz_records import FakePrefill


def sections(html: str) -> dict[str, str]:
    """stage key -> that step's HTML."""
    return dict(re.findall(r'<section class="ii-tour-step" data-stage="(\w+)"(.*?)</section>', html, re.S))


def test_one_step_per_pipeline_stage_in_the_strip_order(tiny_loaded, tiny_run):
    rec = tiny_run.records[-1]
    strip = pipeline_html(rec, _pipe_facts(tiny_loaded))
    stages = re.findall(r'data-stage="(\w+)"', strip)
    keys = [k for k, *_ in STEPS]
    assert keys[:len(stages)] == stages  # the tour walks the strip's stages in its order, then more
    html = tour_html(tour_facts(tiny_loaded), rec, "x")
    assert list(sections(html)) == keys
    for key, text in sections(html).items():
        body = re.sub(r"<[^>]+>", "", text.split('class="ii-tour-text">', 1)[1])
        if key != "keys":  # every stage: 2-3 plain sentences (the last step is the shortcuts and glossary)
            assert 2 <= body.count(". ") + 1 <= 4, (key, body)


def test_the_kv_step_names_this_runs_numbers_and_equals_the_kv_view(tiny_loaded, tiny_run):
    cfg = tiny_loaded.config
    for rec in tiny_run.records:  # the prefill and each decode step
        html = tour_html(tour_facts(tiny_loaded), rec, "")
        f = vk.formula(rec.kv)
        tokens = int(re.search(r'id="tour-kv-tokens" data-tokens="(\d+)"', html).group(1))
        total = int(re.search(r'id="tour-kv-bytes" data-bytes="(\d+)"', html).group(1))
        assert tokens == f["tokens"] == rec.start_pos + rec.n_new
        assert total == f["total"] == f["measured"]  # the KV view's formula line and the cache's own bytes
        assert f"{total:,} bytes" in vk.summary_html(rec.kv, 1) and f"{total:,} bytes" in html
        assert total == kv_bytes(cfg, tokens, 4)
        kv = sections(html)["kv"]
        assert (f"{cfg.num_hidden_layers} layers × 2 (K and V) × {cfg.num_key_value_heads} KV heads × "
                f"{cfg.head_dim} numbers × 4 bytes") in kv
        assert f"{cfg.num_attention_heads} query heads share {cfg.num_key_value_heads} KV heads" in kv


def test_default_model_sentence_matches_the_issue():
    """SmolLM2-135M's numbers: 30 layers, 9 query heads over 3 KV heads, head_dim 64, fp32."""
    facts = TourFacts(576, 30, 9, 3, 64, 49152, 4, 30 * 2 * 3 * 64 * 4)
    rec = FakePrefill(n=12)
    kv = sections(tour_html(facts, rec))["kv"]  # type: ignore[arg-type]
    assert "12 tokens</b> × 30 layers × 2 (K and V) × 3 KV heads × 64 numbers × 4 bytes = " in kv
    assert "552,960 bytes (540.0 KiB)" in kv and "because 9 query heads share 3 KV heads" in kv


def test_before_a_run_the_tour_has_per_token_numbers_and_every_view_a_step(tiny_loaded):
    html = tour_html(tour_facts(tiny_loaded), None)
    assert 'data-kind="idle"' in html and "tour-kv-bytes" not in html
    assert f"{tour_facts(tiny_loaded).kv_bytes_per_token:,} bytes" in sections(html)["kv"]
    assert set(VIEW_STEP) == {"tab-residual", "tab-attention", "tab-kv", "tab-sampling", "tab-inventory", "tab-timing"}
    assert VIEW_STEP["tab-kv"] == "kv" and VIEW_STEP["tab-residual"] == "embed"


def test_shortcuts_and_glossary_are_in_the_last_step(tiny_loaded):
    keys = sections(tour_html(tour_facts(tiny_loaded), None))["keys"]
    assert "<kbd>→</kbd>" in keys and "<kbd>space</kbd>" in keys
    for term, _ in GLOSSARY:
        assert f"<dt>{term}</dt>" in keys
    for term in ("token", "embedding", "residual stream", "KV cache", "GQA", "logits", "softmax", "temperature",
                 "prefill", "decode"):
        assert any(t == term or term in t for t, _ in GLOSSARY)


def test_precision_notes():
    """The notes without the file's tensor types (tests/unit/viz/test_viz_precision.py has them with)."""
    assert precision_note("safetensors fp32", "float32") == "" and precision_note("GGUF F32", "float32") == ""
    note = precision_note("GGUF Q4_1", "float32")
    assert 'Q4_1 GGUF, so "float32" here means that file\'s rounded values held in float32' in note
    assert "rounded values of a Q4_1 GGUF" in quant_lab_note("GGUF Q4_1")
    assert quant_lab_note("safetensors bf16") == ""


def test_play_pace_is_validated_and_pause_ends_the_wait():
    assert step_interval(2, False) == 0.5 and step_interval(20, False) == 0.05
    assert step_interval(None, True) is None and step_interval(3, True) is None
    for bad in (None, "", "abc", -5, 0, 21, 1e309, float("nan")):
        with pytest.raises(InputError, match=r"speed \(tokens/s\) (must be|is empty)"):
            step_interval(bad, False)
    pause = threading.Event()
    t0 = time.monotonic()
    threading.Timer(0.1, pause.set).start()
    wait_for_pace(pause, t0, 10.0)  # a 10 s interval, ended by Pause
    assert time.monotonic() - t0 < 2.0


def test_play_at_a_speed_paces_its_steps(tiny_loaded):
    h, _ = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 7, 0, 0)[0]
    t0 = time.monotonic()
    updates = list(h.play(sid, *SAMPLING, 0, 0, 10, False))  # 6 steps at 10 tok/s: at least 0.5 s
    assert len(updates) >= 6 and time.monotonic() - t0 >= 0.5
    sid = h.prefill(sid, "The quick brown fox", False, "", *SAMPLING, 7, 0, 0)[0]
    bad = list(h.play(sid, *SAMPLING, 0, 0, -5, False))
    assert len(bad) == 1 and "speed (tokens/s) must be" in bad[0]["status"]


def test_system_note_says_what_is_used():
    smol = TemplateSystem(True, True, "You are SmolLM")
    assert 'data-system="default"' in system_note_html(smol, True, "") and "You are SmolLM" in system_note_html(smol, True, " ")
    assert 'data-system="given"' in system_note_html(smol, True, "Be brief.")
    assert 'data-system="off"' in system_note_html(smol, False, "Be brief.")
    assert 'data-system="none"' in system_note_html(TemplateSystem(True, False, None), True, "")
    assert 'data-system="none"' in system_note_html(TemplateSystem(False, False, None), True, "")
    assert 'data-system="empty"' in system_note_html(TemplateSystem(True, True, None), True, "")


@pytest.mark.slow
def test_the_default_models_template_default_is_read(default_model):
    info = template_system(default_model.tokenizer)
    assert info.supported and info.default == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert default_model.tokenizer.render_chat("hi", system=info.default) == default_model.tokenizer.render_chat("hi")


def test_fresh_selections_unless_pinned(tiny_loaded):
    assert fresh_selections(False) == FRESH == (0, 0, -1)
    assert all(v == {"__type__": "update"} or "__type__" in v for v in fresh_selections(True))
    h, store = make(tiny_loaded)
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 4, 0, 0)[0]
    h.select(sid, 2, 0, 0)
    assert store.get(sid).selected == 2
    h.prefill(sid, "Hello world again", False, "", *SAMPLING, 4, 0, 0)
    assert store.get(sid).selected is None  # the server's selection starts fresh with every run
    h.select(sid, 2, 0, 0)
    h.prefill(sid, "Hello world again", False, "", *SAMPLING, 4, 0, 0, False, 2)
    assert store.get(sid).selected is None  # not pinned: fresh
    views = h.prefill(sid, "Hello world again", False, "", *SAMPLING, 4, 0, 0, True, 2)[1]
    assert store.get(sid).selected == 2  # pinned: the position carries over, in the prefill's own views
    assert 'ii-selected" data-pos="2"' in str(views["chips"]) and "ii-error" not in views["status"]
    n_prompt = len(store.get(sid).session.prompt_ids)
    views = h.prefill(sid, "Hi", False, "", *SAMPLING, 4, 0, 0, True, n_prompt + 5)[1]
    assert store.get(sid).selected is None  # pinned past the new run's end: the newest, and the status says why
    assert "the pinned position was not kept" in views["status"] and f"got {n_prompt + 5}" in views["status"]
    assert "ii-error" in views["status"]
    views = h.prefill(sid, "Hello world again", False, "", *SAMPLING, 4, 0, 0, True, -1)[1]
    assert store.get(sid).selected is None and "ii-error" not in views["status"]  # pinned at the newest


def _pipe_facts(loaded):
    from inspector.viz.pipeline import ModelFacts

    c = loaded.config
    return ModelFacts(c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.vocab_size)
