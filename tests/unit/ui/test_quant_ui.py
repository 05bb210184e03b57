"""The Quantization tab's handlers and view builders without a browser, over a tiny model: Run, the step
selector, the histogram, one-line errors, caps before model work, one quantized model per scheme per process."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from tests.support.lab_context import make_ctx, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

PROMPT = "The quick brown fox jumps over the lazy dog."




def test_run_fills_every_view_and_the_step_selector_redraws(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    out = ctx.panels["quant"].compare(sid, "int4-g32", "int8", PROMPT, False, "", 6)
    assert 'data-error="0"' in status(out), status(out)
    summary = out["summary"]
    assert 'data-scheme="int4:32"' in summary and 'data-kv="int8"' in summary and 'data-positions="6"' in summary
    memory, speed, strip, layers, dists = (out[k] for k in ("memory", "speed", "strip", "layers", "dists"))
    assert [b for b in memory.data[0].y][:3] == ["fp32", "bf16", "int8"] and "int4-g128" not in memory.data[0].y
    assert memory.data[0].x[0] > 4 * memory.data[0].x[3]  # fp32 bytes vs int4-g32's
    assert set(speed.data[0].y) == {"fp32", "int4-g32"} and all(v > 0 for v in speed.data[0].x)
    assert len(strip.data[0].y) == 6 and len(layers.data[0].y) == tiny_loaded.config.num_hidden_layers
    assert [t.name for t in dists.data] == ["fp32", "int4-g32"]
    state = ctx.store.get(sid).labs["quant"]
    rec = state.record
    assert set(vars(state)) == {"record", "stats", "kv", "step", "inventory"}  # records only, never a model
    assert "int4 g32" in out["inventory"] and "fp32 (shared)" in out["inventory"]  # the inventory's precision column
    s_out = ctx.panels["quant"].select_step(sid, 3)
    assert 'data-error="0"' in status(s_out) and "Step 3" in s_out["dists"].layout.title.text
    assert s_out["strip"].layout.shapes[0].x0 == 2.5
    assert rec.steps[3].fp32_top.ids[0] == rec.steps[3].token_id  # fp32 greedy token tops its distribution


def test_quantized_models_are_built_once_per_scheme_per_process(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    a, b = ctx.store.new_id(), ctx.store.new_id()
    ctx.panels["quant"].compare(a, "int8", "fp32", PROMPT, False, "", 3)
    lab = ctx.panels["quant"].lab()
    model = lab.model("int8")
    ctx.panels["quant"].compare(b, "int8", "fp32", "Hello world", False, "", 3)
    assert lab.model("int8") is model and ctx.panels["quant"].lab() is lab and ctx.store.shared["quant"] is lab
    assert 0 < lab.extra_bytes < 0.5 * lab.fp32_bytes  # shared norms are not counted twice


def test_histogram_before_and_after(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    out = ctx.panels["quant"].histogram(sid, "int4-g32", "model.layers.0.mlp.down_proj.weight")
    assert 'data-error="0"' in status(out)
    fig = out["histogram"]
    assert isinstance(fig, go.Figure) and sum(fig.data[0].y) == sum(fig.data[1].y) == 128 * 64
    assert fig.data[1].y != fig.data[0].y  # quantization moved values between bins


@pytest.mark.parametrize("args,message", [
    (("int3", "fp32", PROMPT, False, "", 4), "unknown precision"),
    (("int8", "int2", PROMPT, False, "", 4), "unknown KV cache precision"),
    (("int4-g128", "fp32", PROMPT, False, "", 4), "does not divide the hidden size 64"),
    (("int8", "fp32", "   ", False, "", 4), "prompt is empty"),
    (("int8", "fp32", PROMPT, False, "", 0), "max new tokens must be > 0"),
    (("int8", "fp32", PROMPT, False, "", 10**6), "capped"),
])
def test_bad_controls_are_one_line(tiny_loaded, args, message):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    out = ctx.panels["quant"].compare(ctx.store.new_id(), *args)
    assert 'data-error="1"' in out["status"] and message in status(out) and "\n" not in status(out)


def test_step_and_histogram_errors_are_one_line(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    assert "press Run first" in status(ctx.panels["quant"].select_step(sid, 0))
    ctx.panels["quant"].compare(sid, "bf16", "fp32", PROMPT, False, "", 3)
    assert "step must be a whole number from 0 to 2, got 7" in status(ctx.panels["quant"].select_step(sid, 7))
    for bad in (None, "abc", float("nan"), float("inf"), -1, 1.5):  # the slider's box can send each
        assert "step " in status(ctx.panels["quant"].select_step(sid, bad))
    assert "unknown matrix" in status(ctx.panels["quant"].histogram(sid, "int8", "lm_head.bias"))


def test_caps_before_model_work(tiny_loaded, monkeypatch):  # noqa: F811
    ctx = make_ctx(tiny_loaded, max_prompt_tokens=4)
    monkeypatch.setattr("inspector.ui.labs.quantization.model_thread.call", lambda *a, **k: pytest.fail("model work before the caps"))
    out = ctx.panels["quant"].compare(ctx.store.new_id(), "int8", "fp32", PROMPT, False, "", 4)
    assert "INSPECTOR_MAX_PROMPT_TOKENS" in status(out)
