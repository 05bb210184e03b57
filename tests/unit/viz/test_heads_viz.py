"""The head atlas's figures from hand-made records: each head's colour band is its strongest role and its
hover its four scores, the two patterns side by side with the future blank (the probe's alone without a run),
the ablation bars, a run's ablation (with a random-heads one beside it) and the legend's sentences with the
probe's numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inspector.analysis.head_findings import (ROLES, AblationRow, HeadAblation, HeadAtlas, HeadPattern, Probe,
                                              RunAblation)
from inspector.viz import heads as vh


def title(fig) -> str:
    """The figure's title on one line (`figure` wraps long titles with <br>)."""
    return fig.layout.title.text.replace("<br>", " ")


def probe(prefix: tuple[int, ...] = ()) -> Probe:
    ids = np.zeros((3, len(prefix) + 10), dtype=np.int64)
    return Probe(5, 3, 7, prefix, ids, 100, 4)


def atlas() -> HeadAtlas:
    rng = np.random.default_rng(0)
    scores = {r: rng.uniform(0, 0.5, size=(3, 2)) for r in ROLES}
    scores["induction"][2, 1] = 0.9
    scores["previous_token"][0, 0] = 0.8
    return HeadAtlas(probe(), scores, 1.5, 3)


def test_atlas_map_colours_each_head_by_its_strongest_role_with_all_scores_on_hover():
    a = atlas()
    trace = vh.atlas_figure(a).data[0]
    z = np.array(trace.z)
    assert z.shape == (3, 2) and trace.zmax == len(ROLES)
    assert math.floor(z[2, 1]) == ROLES.index("induction") and z[2, 1] - 3 == pytest.approx(0.9)
    assert math.floor(z[0, 0]) == ROLES.index("previous_token")
    assert (np.floor(z) == a.strongest()).all()
    assert trace.customdata[2][1] == "2.1"
    hover = trace.text[2][1]
    assert hover.startswith("head 2.1: strongest induction")
    for r, name in vh.ROLE_NAMES.items():
        assert f"{name} {a.scores[r][2, 1]:.3f}" in hover
    assert list(trace.colorbar.ticktext) == [vh.ROLE_NAMES[r] for r in ROLES]


def test_pattern_pair_shows_the_probe_with_its_repeat_beside_the_run():
    T = 11
    tri = np.tril(np.ones((T, T), dtype=np.float32))
    left = HeadPattern(2, 1, tri / tri.sum(1, keepdims=True), [f"t{i}" for i in range(T)], "probe sequence 0", 6)
    right = HeadPattern(2, 1, np.eye(4, dtype=np.float32), ["a", "b", "c", "d"], "this run (4 tokens)")
    fig = vh.pattern_pair_figure(left, right)
    a, b = fig.data
    assert np.array(a.z).shape == (T, T) and np.array(b.z).shape == (4, 4)
    assert math.isnan(a.z[0][1]) and a.z[1][0] == 0.5 and b.z[3][3] == 1.0
    assert (a.xaxis, b.xaxis) == ("x", "x2")
    assert [s["y0"] for s in fig.layout.shapes][0] == 5.5  # between the first copy and the repeat
    assert "Head 2.1" in title(fig) and "this run (4 tokens)" in fig.layout.xaxis2.title.text


def test_pattern_alone_without_a_run():
    T = 11
    tri = np.tril(np.ones((T, T), dtype=np.float32))
    fig = vh.pattern_pair_figure(HeadPattern(0, 3, tri / tri.sum(1, keepdims=True), [f"t{i}" for i in range(T)],
                                             "probe sequence 0", 6))
    (only,) = fig.data
    assert only.showscale and np.array(only.z).shape == (T, T) and "on the probe" in title(fig)
    assert "right" not in title(fig) and fig.layout.xaxis.domain == (0.0, 1.0)


def test_ablation_bars_per_copy_and_condition():
    rows = [AblationRow("none", [], 10.0, 1.0), AblationRow("top 2 induction heads", [(1, 0), (2, 1)], 10.2, 6.0),
            AblationRow("2 random heads", [(0, 1), (1, 1)], 10.1, 1.2)]
    fig = vh.ablation_figure(HeadAblation("induction", 2, 3, rows, 0.5))
    first, repeat = fig.data
    assert list(first.x) == ["no head off", "top 2 induction heads", "2 random heads"]
    assert list(first.y) == [10.0, 10.2, 10.1] and list(repeat.y) == [1.0, 6.0, 1.2]
    assert list(repeat.customdata) == ["—", "1.0, 2.1", "0.1, 1.1"]
    assert "top 2 induction heads" in title(fig) and "2 random heads" in title(fig)


def test_run_ablation_bars_and_whether_the_contexts_match():
    r = RunAblation("heads 1.0 off", [(1, 0)], 4, 4, [("x", 0.6), ("y", 0.3)], [("y", 0.5), ("x", 0.2)], "x", 0.6,
                    0.2, None)
    fig = vh.run_ablation_figure(r)
    assert [list(t.x) for t in fig.data] == [[0.3, 0.6], [0.2, 0.5]]
    assert "the same tokens before it" in title(fig) and "0.600 → 0.200" in title(fig)
    rand = RunAblation("2 random heads off", [(0, 1), (1, 1)], 4, 4, [("x", 0.6), ("y", 0.3)],
                       [("x", 0.55), ("z", 0.25)], "x", 0.6, 0.55, None)
    three = vh.run_ablation_figure(r, rand)
    assert [t.name for t in three.data] == ["as it was", "heads 1.0 off", "2 random heads off"]
    assert list(three.data[2].x) == [0.25, 0.55] and list(three.data[2].y) == ["z", "x"]
    assert "with 2 random heads off (the same tokens before it): 0.550" in title(three)
    parted = RunAblation("heads 1.0 off", [(1, 0)], 4, 4, [], [], "x", 0.6, 0.1, 2)
    assert not parted.same_context and "part at step 2" in title(vh.run_ablation_figure(parted))


def test_legend_names_the_probe_and_each_role_by_its_definition():
    text = vh.legend_text(probe(prefix=(2,)))
    lines = text.splitlines()
    assert len(lines) == 5
    assert "3 sequences of 5 random tokens, each repeated once (seed 7) after a BOS" in lines[0]
    assert "i → i−1" in lines[1] and "i → 0" in lines[2] and "i → i−5" in lines[3] and "i → i−4" in lines[4]
    assert "Olsson et al. 2022" in lines[4]
    assert "after a BOS" not in vh.legend_text(probe())
