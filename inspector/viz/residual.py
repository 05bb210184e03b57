"""Residual stream view: how big the hidden state is at every layer and position, and the logit lens.

Input is the session's `ForwardRecord`s; each holds (num_layers, n_new) norms for the positions it
added, so the full picture is their concatenation along positions.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from inspector.records import ForwardRecord
from inspector.viz.common import ATTN, CHOSEN, HEAT, MLP, PROMPT, esc, figure, position_ticks, show_piece, vline

CAPTION = ("Residual stream: the hidden vector each position carries through the layers. The heatmap is its "
           "size (L2 norm) after every layer; the chart shows, for the selected position, what attention and "
           "the MLP add at each layer; the logit lens decodes the newest position's residual at every layer.")


def residual_norms(records: list[ForwardRecord]) -> np.ndarray:
    """(num_layers, positions) norms of resid_post over every position processed so far."""
    return np.concatenate([r.resid_post for r in records], axis=1).astype(np.float32)  # (L, T)


def locate(records: list[ForwardRecord], position: int) -> tuple[ForwardRecord, int]:
    """The record that processed `position`, and the position's column inside it."""
    for r in records:
        if r.start_pos <= position < r.start_pos + r.n_new:
            return r, position - r.start_pos
    raise ValueError(f"position {position} has not been processed yet")


def residual_heatmap(records: list[ForwardRecord], pieces: list[str], selected: int | None = None) -> go.Figure:
    """Heatmap layers × positions of ‖resid_post‖, position labels from token pieces."""
    z = residual_norms(records)
    n_layers, n_pos = z.shape
    labels = [f"{p}:{show_piece(pieces[p], 8)}" if p < len(pieces) else str(p) for p in range(n_pos)]
    # The first position is usually an "attention sink" with a norm far above the rest: clip the colors
    # at the 99th percentile of the other positions so the others stay readable (hover shows true values).
    rest = z[:, 1:] if n_pos > 1 else z
    zmax = float(np.percentile(rest, 99)) if rest.size else 1.0
    clipped = bool((z > zmax).any())
    heat = dict(type="heatmap", z=z, x=list(range(n_pos)), y=list(range(n_layers)), colorscale=HEAT, zmin=0.0,
                zmax=max(zmax, 1e-6), colorbar={"title": {"text": "‖x‖" + (" (clipped)" if clipped else "")},
                                                "thickness": 12},
                customdata=np.array([labels] * n_layers),
                hovertemplate="layer %{y} · pos %{customdata}<br>norm %{z:.1f}<extra></extra>")
    shapes = [vline(selected, CHOSEN)] if selected is not None and 0 <= selected < n_pos else []
    return figure([heat], f"Residual norm per layer × position ({n_layers} layers × {n_pos} positions)", 360,
                  shapes=shapes, xaxis={"title": {"text": "position (token)"}, **position_ticks(labels), "tickangle": -60},
                  yaxis={"title": {"text": "layer (after block)"}, "autorange": True})


def position_chart(records: list[ForwardRecord], position: int, piece: str = "") -> go.Figure:
    """For one position: ‖resid‖ after each layer (line) and ‖attention out‖, ‖MLP out‖ added (bars)."""
    rec, col = locate(records, position)
    layers = list(range(rec.resid_post.shape[0]))
    traces = [
        dict(type="bar", x=layers, y=rec.attn_out[:, col], name="attention added ‖attn_out‖", marker={"color": ATTN}),
        dict(type="bar", x=layers, y=rec.mlp_out[:, col], name="MLP added ‖mlp_out‖", marker={"color": MLP}),
        dict(type="scatter", x=layers, y=rec.resid_post[:, col], name="residual after layer ‖resid_post‖",
             mode="lines+markers", line={"color": PROMPT, "width": 2}),
    ]
    title = f"Position {position} {show_piece(piece, 12)!s}: residual and what each layer adds"
    return figure(traces, title, 320, barmode="group", legend={"orientation": "h", "y": -0.25},
                  xaxis={"title": {"text": "layer"}}, yaxis={"title": {"text": "L2 norm"}})


def logit_lens_html(record: ForwardRecord, pieces_of_chosen: str | None = None) -> str:
    """Table: per layer, the top-5 tokens of the newest position's residual read through the LM head."""
    rows = []
    last = len(record.logit_lens) - 1
    for layer, tops in enumerate(record.logit_lens):
        cells = []
        for t in tops:
            hit = pieces_of_chosen is not None and t.piece == pieces_of_chosen
            cls = ' class="ii-hit"' if hit else ""
            cells.append(f'<td{cls} title="id {t.id} · logit {t.logit:.2f}">'
                         f'{esc(show_piece(t.piece, 14))} <small>{t.prob:.0%}</small></td>')
        tag = " (= real logits)" if layer == last else ""
        rows.append(f"<tr><th>{layer}{tag}</th>{''.join(cells)}</tr>")
    pos = record.start_pos + record.n_new - 1
    head = "".join(f"<th>top {i + 1}</th>" for i in range(max((len(t) for t in record.logit_lens), default=0)))
    return (f'<div class="ii-caption">Logit lens at position {pos} (the newest): each layer\'s residual '
            f'→ final RMSNorm → LM head.</div>'
            f'<table id="logit-lens" class="ii-table"><thead><tr><th>layer</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')
