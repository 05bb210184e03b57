"""The Models tab's handlers without a page: the family card of the page's model, and Compare putting
the page's model and a second one side by side (a tiny Gemma 3 stands in for gemma3-270m, no download)."""

from __future__ import annotations

import html

import pytest

from inspector.session.compare import family_card, next_tokens
from inspector.ui.labs import models as models_tab
from inspector.viz.models import family_html
from tests.support.lab_context import make_ctx, status
from tests.support.viz_records import tiny_loaded  # noqa: F401
from tests.support.tiny import make_tiny_checkpoint

PROMPT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    from inspector.models.loader import load_model

    directory = make_tiny_checkpoint(tmp_path_factory.mktemp("gemma"), model_type="gemma3_text", sliding_window=4,
                                     layer_types=["sliding_attention", "full_attention"])
    return load_model(str(directory))


def test_family_card_names_the_additions_and_the_layer_kinds(tiny_gemma, tiny_loaded):  # noqa: F811
    card = family_card(tiny_gemma)
    assert card.layer_kinds == ["local", "global"] and card.window == 4 and card.rope_local_theta == 10000.0
    page = family_html(card)
    assert "post-attention and post-feed-forward norms" in page and 'data-kind="local"' in page
    assert "1 local layers" in html.unescape(page) and "4 latest positions" in html.unescape(page)
    llama = family_html(family_card(tiny_loaded))
    assert "the Llama block as it is" in llama and 'data-kind="local"' not in llama


def test_compare_puts_both_models_side_by_side(tiny_gemma, tiny_loaded, monkeypatch):  # noqa: F811
    monkeypatch.setitem(models_tab._loaded, "gemma3-270m", tiny_gemma)
    ctx = make_ctx(tiny_loaded)
    out = ctx.panels["models"].compare(None, "gemma3-270m", PROMPT, False, "")
    right = next_tokens(tiny_gemma, PROMPT, False)
    assert f"and {len(right.ids)} prompt tokens" in status(out)
    assert out["side"].count('class="side"') == 2 and f'data-tokens="{len(right.ids)}"' in out["side"]
    assert right.ids == tiny_gemma.tokenizer.encode(PROMPT)  # no BOS: this tokenizer_config does not ask for one
    # a chat prompt: the page's model has a template, the second one (no template) reads the plain prompt
    tiny_gemma.tokenizer.chat_template = None
    out = ctx.panels["models"].compare(None, "gemma3-270m", PROMPT, True, "")
    assert "has no chat template, so it reads the plain prompt" in status(out)


@pytest.mark.parametrize("key, prompt, message", [("gpt-5", PROMPT, "unknown model 'gpt-5'"),
                                                   ("gemma3-270m", "  ", "the prompt is empty")])
def test_bad_input_is_one_status_line(tiny_loaded, key, prompt, message):  # noqa: F811
    out = make_ctx(tiny_loaded).panels["models"].compare(None, key, prompt, False, "")
    assert message in status(out) and "\n" not in status(out)


def title(fig) -> str:
    """A figure's title as one line (long titles wrap with <br> to fit a phone)."""
    return fig.layout.title.text.replace("<br>", " ")


def test_attention_views_mark_local_layers_and_their_window():
    import numpy as np

    from inspector.viz.attention import overview_html, pattern_heatmap, row_bars

    n = 10
    pattern = np.tril(np.ones((n, n), np.float32)) / np.arange(1, n + 1)[:, None]
    pieces = [f"t{i}" for i in range(n)]
    local = pattern_heatmap(pattern, pieces, 0, 1, 0, 0, window=4)
    z = np.asarray(local.data[0].z, dtype=float)
    assert np.isnan(z[9, 5]) and not np.isnan(z[9, 6]) and np.isnan(z[2, 3])  # window 4: keys 6..9 for query 9
    assert "local layer, window 4" in title(local)
    glob = pattern_heatmap(pattern, pieces, 0, 1, 0, 0)
    assert not np.isnan(np.asarray(glob.data[0].z, dtype=float)[9, 0]) and "local" not in title(glob)
    bars = row_bars(pattern[9], pieces, 5, 9, 1, 0, 0, window=4)
    assert bars.layout.shapes[0].x0 == 5.5 and "local layer" in title(bars)
    over = overview_html(np.ones((2, 2, n), np.float32) / n, pieces, 1, 9, local=[True, False])
    assert "kv1 local&quot;" in over and "kv0 global&quot;" in over and "L0ᴸ<" in over and "L1ᴳ<" in over


def test_a_second_model_is_admitted_and_counted_for_the_server(tiny_loaded, tiny_gemma, monkeypatch):  # noqa: F811
    """Loading the second model holds its weights for the whole process: admitted first (the server refuses
    it in one line when full), then counted with the shared models."""
    from inspector.models.catalog import MODELS
    from inspector.ui import admission
    from inspector.ui.app_model import AppLimits

    monkeypatch.setattr(models_tab, "_loaded", {})
    monkeypatch.setattr("inspector.models.loader.load_model", lambda key, **kw: tiny_gemma)
    ctx = make_ctx(tiny_loaded)
    need = MODELS["gemma3-270m"].params * tiny_loaded.dtype.itemsize
    ctx.limits = AppLimits(max_sessions=1, max_trace_mb=need / 2 / 2**20)
    ctx.panels["models"].page.limits = ctx.limits
    out = ctx.panels["models"].compare(None, "gemma3-270m", PROMPT, False, "")
    assert "the server is full" in status(out) and admission.process_nbytes(ctx.store) == 0
    ctx.panels["models"].page.limits = AppLimits()
    out = ctx.panels["models"].compare(None, "gemma3-270m", PROMPT, False, "")
    assert "prompt tokens" in status(out) and admission.process_nbytes(ctx.store) == need
