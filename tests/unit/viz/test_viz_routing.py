"""The routing view's builders (inspector.viz.routing) and the MoE weights-read chart (inspector.viz.timing).

On records a hand-made run gives (routing set by hand, so every number is known) and on a real session over
a tiny random Mixtral: the map's cells are each position's top expert in each layer and its colors tell the
experts apart; the router chart is the router's distribution with the chosen experts marked by their
weights; the load counts each expert's tokens; the observed union matches a count by hand; the curve runs
from k to E; the weights-read chart adds the shared bytes and the distinct experts each step read.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from inspector.engine.config import SamplingParams
from inspector.serving.experts import expected_experts
from inspector.session.records import ForwardRecord, RoutingRecord
from inspector.viz import routing as vr
from inspector.viz import timing as vt
from tests.support.tiny import tiny_moe_dir  # noqa: F401

E, K, L = 4, 2, 2


def record(step: int, start: int, ids: np.ndarray, probs: np.ndarray) -> ForwardRecord:
    """A ForwardRecord of ids.shape[1] positions whose routing is `ids` (L, n, k) and `probs` (L, n, E)."""
    n = ids.shape[1]
    weights = np.take_along_axis(probs, ids, axis=-1)
    weights = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    zeros = np.zeros((L, n), np.float32)
    return ForwardRecord("prefill" if step == 0 else "decode", step, start, list(range(n)), True, zeros, zeros,
                         zeros, zeros, zeros, [], np.zeros(8, np.float16), [], 1.0,
                         routing=RoutingRecord(ids.astype(np.int32), weights, probs.astype(np.float32)))


@pytest.fixture
def hand_run() -> list[ForwardRecord]:
    """A prompt of 3 positions then 2 decode steps, 2 layers, 4 experts, 2 per token."""
    ids = np.array([[[0, 1], [1, 2], [0, 1], [3, 0], [0, 1]],  # layer 0, positions 0..4: (expert, expert)
                    [[2, 3], [2, 3], [1, 2], [2, 0], [3, 2]]])  # layer 1
    probs = np.full((L, 5, E), 0.05)
    for layer in range(L):
        for p in range(5):
            probs[layer, p, ids[layer, p, 0]], probs[layer, p, ids[layer, p, 1]] = 0.6, 0.3
    probs /= probs.sum(-1, keepdims=True)
    return [record(0, 0, ids[:, :3], probs[:, :3]), record(1, 3, ids[:, 3:4], probs[:, 3:4]),
            record(2, 4, ids[:, 4:5], probs[:, 4:5])]


def heat_values(html: str) -> np.ndarray:
    """The cell values an image heatmap reports on hover, (rows, cols)."""
    z = np.frombuffer(base64.b64decode(re.search(r'data-z="([^"]+)"', html).group(1)), "<f4")
    rows = json.loads(re.search(r"data-rows='([^']+)'", html).group(1).replace("&quot;", '"'))
    return z.reshape(len(rows), -1)


def test_the_map_shows_each_positions_top_expert_per_layer(hand_run):
    html = vr.routing_map(hand_run, ["a", "b", "c", "d", "e"], position=3, layer=1)
    z = heat_values(html)  # (L, P), last layer on top
    assert z.tolist() == [[2, 2, 1, 2, 3], [0, 1, 0, 3, 0]]
    assert 'id="routing-map"' in html and "2 of 4 experts" in html and "ii-hm-col" in html and "ii-hm-row" in html


@pytest.mark.parametrize("num_experts", [3, 8, 48, 128])
def test_every_expert_gets_a_color_of_its_own_up_to_48(num_experts):
    ids = np.arange(num_experts)
    colors = vr.expert_lut(num_experts)[vr.expert_code(ids, num_experts)]  # (E, 3)
    distinct = len({tuple(c) for c in colors})
    assert distinct == num_experts if num_experts <= 48 else distinct > num_experts // 2


def test_the_router_chart_is_the_distribution_with_the_chosen_marked(hand_run):
    fig = vr.router_chart(hand_run, position=3, layer=0, piece=" fox")
    bars = fig.data[0]
    probs = hand_run[1].routing.router_probs[0, 0]
    assert list(bars.x) == list(range(E)) and np.allclose(bars.y, probs)
    chosen = [e for e, c in enumerate(bars.marker.color) if c == vr.CHOSEN]
    assert chosen == [0, 3]
    weights = hand_run[1].routing.expert_weights[0, 0]  # expert 3 first (0.6), then 0 (0.3), renormalised
    assert bars.text[3] == f"w {weights[0]:.2f}" and bars.text[0] == f"w {weights[1]:.2f}" and bars.text[1] == ""
    title = fig.layout.title.text.replace("<br>", " ")
    assert "layer 0" in title and "chose 3 (0.67), 0 (0.33)" in title
    with pytest.raises(ValueError):
        vr.router_chart(hand_run, position=5, layer=0)


def test_the_load_counts_each_experts_tokens(hand_run):
    shares = vr.load_shares(hand_run)
    assert np.allclose(shares, [[4 / 5, 4 / 5, 1 / 5, 1 / 5], [1 / 5, 1 / 5, 5 / 5, 3 / 5]])
    assert np.allclose(shares.sum(-1), K)
    z = heat_values(vr.expert_load(hand_run))
    assert np.allclose(z, shares[::-1])


def test_the_observed_union_counts_distinct_experts_per_window(hand_run):
    got = dict(vr.observed_union(hand_run, [1, 2, 5, 6]))
    assert got[1] == 2.0  # each token: its k distinct experts
    # B = 2, windows (0, 1) and (2, 3): layer 0 {0,1,2}, {0,1,3}; layer 1 {2,3}, {0,1,2}
    assert got[2] == pytest.approx((3 + 3 + 2 + 3) / 4)
    assert got[5] == pytest.approx((4 + 4) / 2) and 6 not in got


def test_the_curve_runs_from_k_to_e():
    expected = [(b, expected_experts(128, 8, b)) for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    fig = vr.experts_read_curve(128, 8, expected, [(1, 8.0), (4, 20.5)])
    line, points = fig.data
    assert line.y[0] == pytest.approx(8) and 120 < line.y[-1] <= 128
    assert list(points.x) == [1, 4] and points.name == "this run's tokens"
    assert sorted(s["y0"] for s in fig.layout.shapes) == [8, 128]


def test_weights_read_per_step_add_the_distinct_experts(hand_run):
    fig = vt.weights_read_chart(hand_run, 10 * 2**20, 2**20, 30 * 2**20)
    shared, experts = fig.data
    assert list(shared.y) == [10.0, 10.0, 10.0]
    assert list(experts.customdata) == [3 + 3, 2 + 2, 2 + 2]  # the prefill read experts {0,1,2} and {1,2,3}
    assert list(experts.y) == [6.0, 4.0, 4.0]


def test_dense_records_have_no_routing():
    zeros = np.zeros((1, 1), np.float32)
    dense = [ForwardRecord("prefill", 0, 0, [1], True, zeros, zeros, zeros, zeros, zeros, [],
                           np.zeros(4, np.float16), [], 1.0)]
    assert not vr.has_routing(dense) and not vr.has_routing([])
    with pytest.raises(ValueError):
        vr.routing_map(dense, ["a"])


def test_the_builders_on_a_real_session(tiny_moe_dir):  # noqa: F811
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    s = Session(load_model(str(tiny_moe_dir)))
    s.prefill("The quick brown fox", SamplingParams(), max_new_tokens=6)
    for _ in range(3):
        s.step(SamplingParams())
    records, pieces = s.records, s.token_pieces()
    assert vr.has_routing(records)
    positions = sum(r.n_new for r in records)
    z = heat_values(vr.routing_map(records, pieces, position=positions - 1, layer=0))
    assert z.shape == (2, positions)
    assert z[-1, -1] == records[-1].routing.expert_ids[0, -1, 0]  # bottom row is layer 0
    fig = vr.router_chart(records, positions - 1, 1, pieces[-1])
    assert np.allclose(sum(fig.data[0].y), 1.0, atol=1e-5)
    assert np.allclose(vr.load_shares(records).sum(-1), 2.0)
    assert dict(vr.observed_union(records, [1]))[1] == 2.0


def test_the_inventory_view_subtotals_the_experts(tiny_moe_dir):  # noqa: F811
    from inspector.models.inventory import build_inventory, is_expert_group
    from inspector.models.loader import load_model
    from inspector.viz.inventory import inventory_html

    inv = build_inventory(load_model(str(tiny_moe_dir)))
    html = inventory_html(inv.entries, tied=False)
    experts = [e for e in inv.entries if is_expert_group(e.group)]
    row = re.search(r'<tr class="ii-experts"><td>all experts</td><td>(\d+)</td><td>([\d,]+) \((\d+)%\)</td>', html)
    assert row and int(row.group(1)) == len(experts)
    assert int(row.group(2).replace(",", "")) == sum(e.params for e in experts)
    assert int(row.group(3)) == round(100 * sum(e.params for e in experts) / inv.params)
    assert "memory holds every expert" in html
    dense = [e for e in inv.entries if not is_expert_group(e.group)]
    assert "ii-experts" not in inventory_html(dense, tied=False)
