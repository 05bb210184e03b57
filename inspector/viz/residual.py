"""Residual stream view: how big the hidden state is at every layer and position, and the logit lens.

Input is the session's `ForwardRecord`s; each holds (num_layers, n_new) norms for the positions it
added, so the full picture is their concatenation along positions. In a family with post-norms (Gemma's
sandwich block: attention and MLP outputs each pass an RMSNorm before the residual adds them) the position
chart also shows what each made before its post-norm, so the norm's rescaling is visible layer by layer.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from inspector.analysis.findings import commitment_layer
from inspector.session.records import ForwardRecord
from plotly.colors import sequential

from inspector.viz import heatimage as hi
from inspector.viz.common import ATTN, MAX_TICKS, MLP, PROMPT, TITLE_OUTSIDE, esc, figure, show_piece

CAPTION = ("Residual stream: the hidden vector each position carries through the layers. The heatmap is its "
           "size (L2 norm) after every layer, before the final norm; the chart shows, for the selected position, "
           "what attention and the MLP add at each layer; the logit lens reads the newest position's residual "
           "after every layer through the final norm and LM head: what it would predict if the model stopped "
           "there. The lens reads early layers poorly (their residual is not yet in the form the LM head reads), "
           "so a token it shows late may be present earlier.")


def residual_norms(records: list[ForwardRecord]) -> np.ndarray:
    """(num_layers, positions) norms of resid_post over every position processed so far."""
    return np.concatenate([r.resid_post for r in records], axis=1).astype(np.float32)  # (L, T)


def locate(records: list[ForwardRecord], position: int) -> tuple[ForwardRecord, int]:
    """The record that processed `position`, and the position's column inside it."""
    for r in records:
        if r.start_pos <= position < r.start_pos + r.n_new:
            return r, position - r.start_pos
    raise ValueError(f"position {position} has not been processed yet")


HEAT_LUT = hi.colormap(sequential.Viridis)


def residual_heatmap(records: list[ForwardRecord], pieces: list[str], selected: int | None = None) -> str:
    """Image heatmap layers × positions of ‖resid_post‖ (top row = the last layer), position labels from
    token pieces; hover gives the true norm."""
    z = residual_norms(records)[::-1]  # (L, T), last layer on top as a stack of blocks reads
    n_layers, n_pos = z.shape
    labels = [f"{p}:{show_piece(pieces[p], 8)}" if p < len(pieces) else str(p) for p in range(n_pos)]
    # The first position is usually an "attention sink" with a norm far above the rest: clip the colors
    # at the 99th percentile of the other positions so the others stay readable (hover shows true values).
    rest = z[:, 1:] if n_pos > 1 else z
    zmax = max(float(np.percentile(rest, 99)) if rest.size else 1.0, 1e-6)
    codes = np.clip(np.round(z / zmax * 255), 0, 255).astype(np.uint8)  # (L, T)
    clipped = bool((z > zmax).any())
    stride = max(1, -(-n_pos // MAX_TICKS))
    every = max(1, -(-n_layers // 10))
    marks = [hi.col_mark(selected, n_pos)] if selected is not None and 0 <= selected < n_pos else []
    return hi.heat_html(hi.HeatImage(
        elem_id="resid-heat-map",
        title=f"Residual norm per layer × position ({n_layers} layers × {n_pos} positions)",
        codes=codes, lut=HEAT_LUT, values=z, what="‖x‖", digits=1,
        row_names=[f"layer {n_layers - 1 - r}" for r in range(n_layers)], col_names=[f"pos {t}" for t in labels],
        y_ticks=[(n_layers - 1 - l, str(l)) for l in range(0, n_layers, every)],
        x_ticks=[(p, labels[p]) for p in range(0, n_pos, stride)],
        scale=(f"{zmax:.0f}" + ("+" if clipped else ""), "0", "‖x‖" + (" (clipped)" if clipped else "")),
        height=260, marks=marks, x_title="position (token)", y_title="layer (after block)"))


def position_chart(records: list[ForwardRecord], position: int, piece: str = "") -> go.Figure:
    """For one position: ‖resid‖ after each layer (line) and ‖attention out‖, ‖MLP out‖ added (bars); with
    post-norms, also those outputs before their post-norm (hollow markers)."""
    rec, col = locate(records, position)
    layers = list(range(rec.resid_post.shape[0]))
    post = rec.attn_out_raw is not None and rec.mlp_out_raw is not None
    after = " (after its post-norm)" if post else ""
    traces = [
        dict(type="bar", x=layers, y=rec.attn_out[:, col], name=f"attention added ‖attn_out‖{after}",
             marker={"color": ATTN}),
        dict(type="bar", x=layers, y=rec.mlp_out[:, col], name=f"MLP added ‖mlp_out‖{after}", marker={"color": MLP}),
        dict(type="scatter", x=layers, y=rec.resid_post[:, col], name="residual after layer ‖resid_post‖",
             mode="lines+markers", line={"color": PROMPT, "width": 2}),
    ]
    if post:
        hollow = {"symbol": "circle-open", "size": 9, "line": {"width": 2}}
        traces += [
            dict(type="scatter", x=layers, y=rec.attn_out_raw[:, col], mode="markers", marker={**hollow, "color": ATTN},
                 name="attention before post_attention_layernorm (hook_attn_out_raw)"),
            dict(type="scatter", x=layers, y=rec.mlp_out_raw[:, col], mode="markers", marker={**hollow, "color": MLP},
                 name="MLP before post_feedforward_layernorm (hook_mlp_out_raw)"),
        ]
    what = "residual, what each layer adds, and the post-norms" if post else "residual and what each layer adds"
    title = f"Position {position} {show_piece(piece, 12)!s}: {what}"
    return figure(traces, title, 380 if post else 320, barmode="group", legend={"orientation": "h", "y": -0.25},
                  xaxis={"title": {"text": "layer"}}, yaxis={"title": {"text": "L2 norm"}},
                  meta=TITLE_OUTSIDE)


def logit_lens_html(record: ForwardRecord, pieces_of_chosen: str | None = None) -> str:
    """Table: per layer, the top-5 tokens of the newest position's residual read through the final norm and the
    LM head (and the final soft-cap, in a family that has one, as `Transformer.unembed` applies it)."""
    rows = []
    last = len(record.logit_lens) - 1
    for layer, tops in enumerate(record.logit_lens):
        cells = []
        for t in tops:
            hit = pieces_of_chosen is not None and t.piece == pieces_of_chosen
            cls = ' class="ii-hit"' if hit else ""
            cells.append(f'<td{cls} data-id="{t.id}" title="id {t.id} · logit {t.logit:.2f} · click: force it here">'
                         f'{esc(show_piece(t.piece, 14))} <small>{t.prob:.0%}</small></td>')
        tag = " (= real logits)" if layer == last else ""
        rows.append(f"<tr><th>{layer}{tag}</th>{''.join(cells)}</tr>")
    pos = record.start_pos + record.n_new - 1
    head = "".join(f"<th>top {i + 1}</th>" for i in range(max((len(t) for t in record.logit_lens), default=0)))
    decided = ""
    if all(record.logit_lens):
        top1 = [tops[0].id for tops in record.logit_lens]
        decided = (f' <span id="commitment-layer" data-layer="{commitment_layer(top1)}">Decided at layer '
                   f'{commitment_layer(top1)} by the lens: from that layer on, its top-1 is the model\'s top-1 at '
                   "the output. That is where the lens shows it, not when the model knows it: the lens reads early "
                   "layers poorly.</span>")
    cap = " → soft-cap" if record.sample is not None and record.sample.softcap is not None else ""
    return (f'<div class="ii-caption">Logit lens at position {pos} (the newest): the residual after each layer '
            f'→ final norm → LM head{cap}; each percentage is that token\'s softmax probability over the whole '
            f'vocabulary.{decided}</div>'
            f'<table id="logit-lens" class="ii-table ii-lens" data-step="{record.step}"><thead><tr><th>after layer</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')
