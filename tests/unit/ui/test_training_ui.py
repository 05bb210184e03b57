"""The Training tab's handlers and view builders without a browser, over a tiny model: Run fills every view
(loss colours per token, perplexity, gradient norms per layer and per weight, the memory table with its
measured / formula labels); the text box defaults to the current run's text, else the page's prompt; empty
and too-long texts are one line, refused before any model work."""

from __future__ import annotations

import math

import pytest

from inspector.ui.labs import training as tab
from inspector.viz import training as vt
from inspector.engine.config import SamplingParams
from tests.support.lab_context import make_ctx, status
from tests.support.viz_records import tiny_loaded  # noqa: F401

TEXT = "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces, then ids."


def test_run_fills_every_view(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    out = ctx.panels["training"].train(sid, TEXT)
    assert 'data-error="0"' in status(out), status(out)
    n = len(tiny_loaded.tokenizer.prompt_ids(TEXT, False))
    assert f"{n} tokens teacher-forced" in status(out)
    summary, tokens, layers, weights, outside, memory, memory_fig = (
        out[k] for k in ("summary", "tokens", "layers", "weights", "outside", "memory", "memory_fig"))
    assert "perplexity" in summary and "mean loss" in summary
    assert tokens.count('class="ii-loss-tok"') == n and tokens.count("data-loss=") == n - 1
    assert "rgb(255," in tokens  # coloured by loss
    cfg = tiny_loaded.config
    assert list(layers.data[0].x) == list(range(cfg.num_hidden_layers)) and min(layers.data[0].y) > 0
    assert "Gradient norm per layer" in layers.layout.title.text and layers.layout.yaxis.title.text
    z = weights.data[0].z
    assert len(z) == cfg.num_hidden_layers and "q" in weights.data[0].x and "down" in weights.data[0].x
    assert "model.embed_tokens.weight" in outside
    assert memory.count('data-how="measured"') == 5 and memory.count('data-how="formula"') == 1
    assert "inference" in memory and "one training step" in memory and "Adam moments" in memory
    assert {t.name.split(" (")[0] for t in memory_fig.data} >= {"weights", "KV cache", "gradients"}
    assert not any(p.requires_grad for p in tiny_loaded.model.parameters())


def test_the_text_defaults_to_the_current_run_else_the_prompt(tiny_loaded):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    sid = ctx.store.new_id()
    assert ctx.panels["training"].current_text(sid, "page prompt") == "page prompt"
    assert ctx.panels["training"].fill_if_empty(sid, "", "page prompt") == {"text": "page prompt"}
    assert ctx.panels["training"].fill_if_empty(sid, "", "") == {}  # nothing to fill: the box is left as it is
    visitor = ctx.store.get_or_create(sid)[1]
    visitor.session.prefill("Hello world", SamplingParams(temperature=0.0), max_new_tokens=4)
    visitor.session.step(SamplingParams(temperature=0.0))
    ids = visitor.session.prompt_ids + visitor.session.generated_ids
    text = ctx.panels["training"].current_text(sid, "page prompt")
    assert text == tiny_loaded.tokenizer.decode(ids) and text.startswith("Hello world")
    assert ctx.panels["training"].fill_if_empty(sid, "typed", "page prompt") == {}  # a typed text stays
    out = ctx.panels["training"].train(sid, "", "page prompt")  # an empty box: the run's text
    assert f"{len(ids)} tokens teacher-forced" in status(out)


@pytest.mark.parametrize("text,message", [
    ("", "the text is empty"),
    ("   ", "the text is empty"),
    ("x" * (tab.MAX_TOKENS * 32 + 1), "characters; this view teacher-forces at most 256 tokens"),
    ("a b " * 300, "is 256 tokens: shorten it"),  # the tiny model's context window is this view's cap too
    ("a", "at least 2 tokens"),
    (None, "the text is empty"),
], ids=["empty", "blank", "too-many-characters", "too-many-tokens", "one-token", "none"])
def test_bad_texts_are_one_line(tiny_loaded, text, message):  # noqa: F811
    ctx = make_ctx(tiny_loaded)
    out = ctx.panels["training"].train(ctx.store.new_id(), text, "")
    line = status(out)
    assert 'data-error="1"' in line and message in line, line
    assert "\n" not in line


def test_loss_colour_scale():
    assert vt.loss_color(0.0) == "rgb(255,255,255)"
    assert vt.loss_color(vt.LOSS_SCALE * 2) == "rgb(255,80,80)"
    assert math.isclose(float(vt.loss_color(5.0).split(",")[1]), 255 - 87.5, abs_tol=0.6)
