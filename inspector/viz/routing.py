"""Routing view of a mixture-of-experts model: which experts each token went to, what the router weighed,
how the load spreads over the experts, and why batching erodes the "few active parameters" advantage.

Input is the session's `ForwardRecord`s, whose `routing` (a `RoutingRecord`: per layer, the positions a
forward added) concatenates along positions like the residual norms; a dense model's records have no
routing, and `has_routing` says so. Pure: records and numbers in, an HTML string or a plotly figure out.

- `routing_map(records, pieces, position, layer)`: tokens × layers, each cell colored by the expert the token's
  router ranked first there (hover: that expert; the title says how many each token goes to).
- `router_chart(records, position, layer, piece)`: the router's distribution over all experts for one token in one
  layer (softmax of its logits), the chosen ones marked with their mixture weights.
- `expert_load(records)`: per layer, the share of the run's tokens routed to each expert so far.
- `experts_read_curve(num_experts, top_k, expected, observed)`: distinct experts one step reads per layer
  against its batch size B: `expected` the uniform-routing curve E·(1 − (1 − k/E)^B) the caller computes
  (`inspector.serving.experts.expected_experts`), `observed` this run's (`observed_union`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale, sequential

from inspector.session.records import ForwardRecord, RoutingRecord
from inspector.viz import heatimage as hi
from inspector.viz.common import CHOSEN, GENERATED, MAX_TICKS, PROMPT, REMOVED, figure, show_piece

CAPTION = ("Routing: in a mixture of experts every layer has several MLPs (experts) where a dense model has one; "
           "a router scores them all for each token and only the top k run. The map colors each token and layer by "
           "the expert ranked first; the bars show the softmax of the router's logits over every expert for the selected token "
           "and layer, the chosen ones labelled with their weight in the token's mixture (those k renormalised in "
           "Mixtral, and in Qwen3-MoE and OLMoE with norm_topk_prob; in Granite a softmax over the k logits alone); "
           "the load shows how the run's tokens spread over the experts.")
LOAD_LUT = hi.colormap(sequential.Blues)


def has_routing(records: Sequence[ForwardRecord]) -> bool:
    """Whether the records hold routing (a mixture-of-experts model; every record of the run then does)."""
    return bool(records) and all(r.routing is not None for r in records)


def routing_arrays(records: Sequence[ForwardRecord]) -> RoutingRecord:
    """The run's routing along every position so far: ids and weights (L, P, k), router probs (L, P, E)."""
    if not has_routing(records):
        raise ValueError("these records hold no routing (a dense model, or nothing recorded)")
    parts = [r.routing for r in records]
    return RoutingRecord(np.concatenate([p.expert_ids for p in parts], axis=1),
                         np.concatenate([p.expert_weights for p in parts], axis=1),
                         np.concatenate([p.router_probs.astype(np.float32) for p in parts], axis=1))


def expert_lut(num_experts: int) -> np.ndarray:
    """(256, 3) colors: code `expert_code(e)` shows expert e in a color of its own (cycling past 48 experts)."""
    colors = qualitative.Dark24 + qualitative.Light24
    palette = colors[:num_experts] if num_experts <= len(colors) else sample_colorscale("Turbo", num_experts)
    return hi.colormap([palette[min(num_experts - 1, c * num_experts // 256)] for c in range(256)])


def expert_code(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """uint8 codes of expert ids under `expert_lut(num_experts)`: ceil(e · 256 / E), which maps back to e."""
    return np.minimum(-(-ids.astype(np.int64) * 256 // num_experts), 255).astype(np.uint8)


def routing_map(records: Sequence[ForwardRecord], pieces: Sequence[str], position: int | None = None,
                layer: int | None = None) -> str:
    """Image heatmap layers × positions, each cell the expert ranked first (top row = the last layer)."""
    r = routing_arrays(records)
    top1 = r.expert_ids[:, :, 0][::-1]  # (L, P), last layer on top
    n_layers, n_pos = top1.shape
    E, k = r.num_experts, r.top_k
    labels = [f"{p}:{show_piece(pieces[p], 8)}" if p < len(pieces) else str(p) for p in range(n_pos)]
    marks = []
    if position is not None and 0 <= position < n_pos:
        marks.append(hi.col_mark(position, n_pos))
    if layer is not None and 0 <= layer < n_layers:
        marks.append(hi.row_mark(n_layers - 1 - layer, n_layers))
    stride, every = max(1, -(-n_pos // MAX_TICKS)), max(1, -(-n_layers // 10))
    return hi.heat_html(hi.HeatImage(
        elem_id="routing-map",
        title=f"Expert ranked first per layer × position (each token goes to {k} of {E} experts per layer)",
        codes=expert_code(top1, E), lut=expert_lut(E), values=top1.astype(np.float32), what="expert", digits=0,
        row_names=[f"layer {n_layers - 1 - i}" for i in range(n_layers)], col_names=[f"pos {t}" for t in labels],
        y_ticks=[(n_layers - 1 - i, str(i)) for i in range(0, n_layers, every)],
        x_ticks=[(p, labels[p]) for p in range(0, n_pos, stride)],
        scale=(f"expert {E - 1}", "expert 0", "top-1 expert"), height=260, marks=marks,
        x_title="position (token)", y_title="layer"))


def router_chart(records: Sequence[ForwardRecord], position: int, layer: int, piece: str = "") -> go.Figure:
    """Bars over every expert: the router's probability for this token in this layer; the chosen k orange,
    labelled with their weight in the token's mixture."""
    r = routing_arrays(records)
    if not (0 <= layer < r.expert_ids.shape[0] and 0 <= position < r.expert_ids.shape[1]):
        raise ValueError(f"no routing for position {position} in layer {layer}")
    probs = r.router_probs[layer, position]  # (E,)
    ids, weights = r.expert_ids[layer, position], r.expert_weights[layer, position]  # (k,) each
    weight_of = {int(e): float(w) for e, w in zip(ids, weights)}
    experts = list(range(r.num_experts))
    colors = [CHOSEN if e in weight_of else REMOVED for e in experts]
    text = [f"w {weight_of[e]:.2f}" if e in weight_of else "" for e in experts]
    chosen = ", ".join(f"{e} ({w:.2f})" for e, w in weight_of.items())
    trace = dict(type="bar", x=experts, y=[float(p) for p in probs], marker={"color": colors}, text=text,
                 textposition="outside", cliponaxis=False,
                 hovertemplate="expert %{x}<br>router probability %{y:.3f}<extra></extra>")
    uniform = {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": 1 / r.num_experts,
               "y1": 1 / r.num_experts, "line": {"dash": "dot", "color": "#6b7280"}}
    who = f" for {show_piece(piece)!r}" if piece else ""
    return figure([trace], f"Router at layer {layer}{who} (position {position}): chose {chosen}", 300,
                  shapes=[uniform], xaxis={"title": {"text": f"expert (dotted: uniform 1/{r.num_experts})"},
                                           **({"dtick": 1} if r.num_experts <= 32 else {})},
                  yaxis={"title": {"text": "softmax of router logits"}, "rangemode": "tozero"})


def load_shares(records: Sequence[ForwardRecord]) -> np.ndarray:
    """(L, E): per layer, the share of the run's positions that went to each expert (rows sum to k)."""
    r = routing_arrays(records)
    L, P, _ = r.expert_ids.shape
    counts = np.zeros((L, r.num_experts), np.float32)
    for layer in range(L):
        counts[layer] = np.bincount(r.expert_ids[layer].ravel(), minlength=r.num_experts)[:r.num_experts]
    return counts / max(P, 1)


def expert_load(records: Sequence[ForwardRecord]) -> str:
    """Image heatmap layers × experts of the share of tokens routed to each expert so far (top row = last
    layer); even routing would give every cell k/E."""
    shares = load_shares(records)[::-1]  # (L, E), last layer on top
    n_layers, E = shares.shape
    k = routing_arrays(records[:1]).top_k
    P = sum(r.n_new for r in records)
    top = max(float(shares.max()), 1e-6)
    every = max(1, -(-n_layers // 10))
    stride = max(1, -(-E // MAX_TICKS))
    return hi.heat_html(hi.HeatImage(
        elem_id="routing-load",
        title=f"Load per layer × expert: share of the {P} tokens so far sent to each (even: {k}/{E} = {k / E:.2f})",
        codes=np.clip(np.round(shares / top * 255), 0, 255).astype(np.uint8), lut=LOAD_LUT, values=shares,
        what="share of tokens", digits=2,
        row_names=[f"layer {n_layers - 1 - i}" for i in range(n_layers)], col_names=[f"expert {e}" for e in range(E)],
        y_ticks=[(n_layers - 1 - i, str(i)) for i in range(0, n_layers, every)],
        x_ticks=[(e, str(e)) for e in range(0, E, stride)],
        scale=(f"{top:.2f}", "0", "share"), height=240, x_title="expert", y_title="layer"))


def observed_union(records: Sequence[ForwardRecord], batches: Sequence[int]) -> list[tuple[int, float]]:
    """(B, mean distinct experts per layer among B consecutive positions of this run, over its whole windows of
    B positions) for each B the run is long enough for: what a batch of B tokens routed like these reads."""
    r = routing_arrays(records)
    L, P, _ = r.expert_ids.shape
    hit = np.zeros((L, P, r.num_experts), bool)  # (L, P, E): position p went to expert e in layer l
    np.put_along_axis(hit, r.expert_ids.astype(np.int64), True, axis=2)
    out = []
    for B in batches:
        n = P // B if B >= 1 else 0
        if n:
            used = hit[:, :n * B].reshape(L, n, B, -1).any(axis=2).sum(axis=-1)  # (L, n) experts per window
            out.append((B, float(used.mean())))
    return out


def experts_read_curve(num_experts: int, top_k: int, expected: Sequence[tuple[int, float]],
                       observed: Sequence[tuple[int, float]] = ()) -> go.Figure:
    """Distinct experts per layer one step reads against its batch size: the uniform-routing curve
    (`expected`: (B, E·(1 − (1 − k/E)^B))) and this run's routing (`observed`), between k and E."""
    xs = [b for b, _ in expected]
    traces = [dict(type="scatter", mode="lines", x=xs, y=[v for _, v in expected], name="uniform routing",
                   line={"color": PROMPT}, hovertemplate="batch %{x}: %{y:.1f} experts<extra></extra>")]
    if observed:
        traces.append(dict(type="scatter", mode="markers", x=[b for b, _ in observed], y=[v for _, v in observed],
                           name="this run's tokens", marker={"color": GENERATED, "size": 8},
                           hovertemplate="%{x} consecutive tokens: %{y:.1f} experts<extra></extra>"))
    lines = [{"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y,
              "line": {"dash": "dot", "color": c}} for y, c in ((top_k, CHOSEN), (num_experts, "#6b7280"))]
    notes = [{"xref": "paper", "yref": "y", "x": 1, "y": y, "xanchor": "right", "yanchor": "bottom",
              "showarrow": False, "text": t}
             for y, t in ((top_k, f"k = {top_k}: one token"), (num_experts, f"E = {num_experts}: every expert"))]
    return figure(traces, f"Experts read per layer by one step of B tokens ({top_k} of {num_experts} each)", 300,
                  shapes=lines, annotations=notes, legend={"orientation": "h", "y": -0.3},
                  xaxis={"title": {"text": "batch size B (tokens in one step)"}, "type": "log"},
                  yaxis={"title": {"text": "distinct experts per layer"}, "range": [0, num_experts * 1.08]})
