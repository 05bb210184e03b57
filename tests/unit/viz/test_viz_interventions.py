"""The intervention views are pure functions of analysis records: what they show can be read back."""

from __future__ import annotations

from inspector.analysis.findings import Attribution, Comparison, LayerParts, PatchSweep
from inspector.viz.interventions import (commitment_strip_html, compare_html, dla_figure, patch_figure,
                                         resid_diff_figure)


def attribution() -> Attribution:
    layers = [LayerParts([0.5, -2.0], 1.0), LayerParts([0.1, 0.2], -0.25, attn_rest=0.0)]
    return Attribution(7, " Paris", 0.0 + 0.3 + 0.5 - 2.0 + 1.0 + 0.1 + 0.2 - 0.25, 0.3, layers)


def test_dla_bars_largest_first_with_clickable_names():
    fig = dla_figure(attribution())
    bar = fig.data[0]
    assert list(bar.y)[::-1][:3] == ["head 0.1", "mlp 0", "head 0.0"]  # drawn bottom-up: largest on top
    assert list(bar.customdata) == list(bar.y)
    assert "sum of parts -0.150" in fig.layout.title.text


def test_patch_heatmap_cells_name_layer_and_position():
    s = PatchSweep("resid_pre", [0, 1], [0, 1, 2], ["a", "b", "c"], ["a", "x", "c"], [[0, 1, 0], [0, 0.5, 0.2]],
                   2.0, -1.0, 5, 6, 1.5)
    fig = patch_figure(s)
    assert fig.data[0].customdata[1][2] == "1:2" and fig.data[0].zmin == -1 and fig.data[0].zmax == 1
    assert "Patching resid_pre" in fig.layout.title.text


def test_compare_marks_the_first_diverging_token():
    c = Comparison(("as is", "head 1.2 off"), (["A", "B", "C"], ["A", "X", "C"]), 1,
                   ([[("A", 0.9)], [("B", 0.6)], [("C", 0.5)]], [[("A", 0.9)], [("X", 0.4)], [("C", 0.5)]]),
                   [[0.0, 0.0], [0.0, 1.5], [0.3, 2.0]])
    html = compare_html(c)
    assert html.count("ii-diverge") == 2 and "first diverging token: step 1" in html
    assert "X 40%" in html and "B 60%" in html
    fig = resid_diff_figure(c)
    assert fig.data[0].z[1] == [0.0, 1.5, 2.0] and fig.layout.shapes[0].x0 == 0.5


def test_commitment_strip():
    html = commitment_strip_html(["a", "b"], [21, None], 30)
    assert "decided at layer 21 of 29" in html and "L21" in html and "logit lens not computed" in html


def test_dla_html_bars_name_their_part():
    from inspector.viz.interventions import dla_html

    html = dla_html(attribution())
    assert html.index('data-part="head 0.1"') < html.index('data-part="mlp 0"') < html.index('data-part="head 0.0"')
    assert "embed" in html and 'data-part="embed"' not in html  # the embedding cannot be ablated


def test_patch_table_cells():
    from inspector.viz.interventions import patch_table_html

    s = PatchSweep("mlp_out", [0, 1], [0, 1], ["a", "b"], ["a", "x"], [[1.0, -1.0], [0.0, 0.5]], 2.0, -1.0, 5, 6, 1.5)
    html = patch_table_html(s)
    assert html.count("ii-patch-cell") == 4 and "data-cell='0:0'" in html
    assert "rgb(255,0,0)" in html and "rgb(0,0,255)" in html and "rgb(255,255,255)" in html
    assert html.index("data-cell='1:0'") < html.index("data-cell='0:0'")  # layer 0 at the bottom


def test_the_residual_views_logit_lens_says_where_the_token_was_decided():
    import numpy as np

    from inspector.session.records import ForwardRecord, TopToken
    from inspector.viz.residual import logit_lens_html

    lens = [[TopToken(i, f"t{i}", 1.0, 0.5)] for i in (4, 9, 9, 9)]
    zeros = np.zeros((4, 1), np.float32)
    rec = ForwardRecord("decode", 3, 10, [1], True, zeros, zeros, zeros, zeros, zeros, lens,
                        np.zeros(5, np.float16), [], 1.0)
    html = logit_lens_html(rec)
    assert 'data-layer="1"' in html and "Decided at layer 1" in html
