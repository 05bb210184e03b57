"""Views of interventions and attribution: the direct-logit-attribution bars, the patching heatmap, the
comparison of two branches, and the commitment layer along the token strip.

Pure functions of `inspector.analysis.findings` data (no torch, no gradio). Clickable parts carry their
name in `customdata` ("head 5.3", "mlp 7"; a heatmap cell its layer and position) for the page to act on.
The DLA views say what the parts sum to (the logit, or the pre-cap logit under a final soft-cap, with the
capped one beside it) and the condition that makes them add up (the norm scales frozen at this position).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from inspector.analysis.findings import Attribution, Comparison, PatchedRun, PatchSweep
from inspector.viz.common import ATTN, CHOSEN, MLP, PROMPT, esc, figure, position_ticks, show_piece
from inspector.viz.tokens import LENS_NOTE

DLA_TOP = 20
DIVERGING = [[0.0, "#2563eb"], [0.5, "#f8fafc"], [1.0, "#dc2626"]]  # blue (negative) - white - red (positive)


def _color(name: str) -> str:
    return ATTN if name.startswith(("head", "attn")) else MLP if name.startswith("mlp") else PROMPT


def dla_figure(a: Attribution, top: int = DLA_TOP) -> go.Figure:
    """Bars of the largest parts of one token's logit, largest magnitude on top; click a head or MLP bar."""
    parts = a.ranked()[:top][::-1]  # plotly draws the first bar at the bottom
    names = [n for n, _ in parts]
    trace = {"type": "bar", "orientation": "h", "x": [v for _, v in parts], "y": names, "customdata": names,
             "marker": {"color": [_color(n) for n in names]},
             "hovertemplate": "%{y}: %{x:+.3f}<extra>click a head or MLP to ablate it</extra>"}
    cap = f"; {a.cap_note()}" if a.softcap is not None else ""
    title = (f"Direct logit attribution of {show_piece(a.piece)!r}: {a.decomposed()} {a.explained:.3f} = sum of parts "
             f"{a.total:.3f} (the {len(parts)} largest by size, either sign){cap}<br><sup>{a.condition()}</sup>")
    return figure([trace], title, height=max(280, 18 * len(parts) + 100),
                  xaxis={"title": {"text": f"contribution to the {a.decomposed()}"}},
                  yaxis={"automargin": True, "title": {"text": "part (embedding, attention head or MLP)"}},
                  margin={"l": 110, "r": 20, "t": 60, "b": 40})


def patch_figure(s: PatchSweep) -> go.Figure:
    """Layers (rows, layer 0 at the bottom) x positions: the normalized logit difference each patch recovered."""
    labels = [f"{p}:{show_piece(s.pieces[p], 8)}" if p < len(s.pieces) else str(p) for p in s.positions]
    trace = {"type": "heatmap", "z": s.matrix, "x": s.positions, "y": s.layers, "zmin": -1, "zmax": 1,
             "colorscale": DIVERGING, "colorbar": {"title": {"text": "recovered"}},
             "customdata": [[f"{L}:{p}" for p in s.positions] for L in s.layers],
             "hovertemplate": "layer %{y}, position %{x}: %{z:.3f}<extra>click to see this patched run</extra>"}
    title = (f"Patching {s.point}: logit difference recovered (clean {s.clean_logit_diff:.2f}, corrupt "
             f"{s.corrupt_logit_diff:.2f}; {s.seconds:.1f} s)")
    return figure([trace], title, height=max(300, 12 * len(s.layers) + 120), xaxis={**position_ticks(labels), "title": {"text": "position patched (token)"}},
                  yaxis={"title": {"text": "layer"}})


def compare_html(c: Comparison) -> str:
    """The two texts, token by token, with the first diverging token marked, then each step's top tokens
    of both branches side by side."""
    first = c.first_diverging

    def strip(pieces: list[str]) -> str:
        out = []
        for k, p in enumerate(pieces):
            mark = ' class="ii-diverge" style="background:#fed7aa;font-weight:bold"' if k == first else ""
            out.append(f"<span{mark} title='step {k}'>{esc(show_piece(p, 20))}</span>")
        return " ".join(out)

    head = (f"<div id='compare-texts'><div><b>{esc(c.labels[0])}</b>: {strip(c.pieces[0])}</div>"
            f"<div><b>{esc(c.labels[1])}</b>: {strip(c.pieces[1])}</div>"
            f"<div class='ii-caption' id='compare-first'>"
            f"{'the same tokens as far as both go' if first is None else f'first diverging token: step {first}'}"
            f"</div></div>")
    rows = []
    for k, (ta, tb) in enumerate(zip(*c.tops)):
        cells = ["; ".join(f"{esc(show_piece(p, 12))} {pr:.0%}" for p, pr in top) for top in (ta, tb)]
        style = " style='background:#fff7ed'" if k == first else ""
        rows.append(f"<tr{style}><td>{k}</td><td>{cells[0]}</td><td>{cells[1]}</td></tr>")
    table = (f"<table class='ii-compare' id='compare-table'><tr><th>step</th><th>{esc(c.labels[0])}</th>"
             f"<th>{esc(c.labels[1])}</th></tr>{''.join(rows)}</table>")
    return head + table


def resid_diff_figure(c: Comparison) -> go.Figure:
    """Steps x layers: the L2 norm of the difference of the two branches' residual streams."""
    z = [list(row) for row in zip(*c.resid_diff)] if c.resid_diff else []  # (layers, steps)
    trace = {"type": "heatmap", "z": z, "colorscale": [[0, "#ffffff"], [1, CHOSEN]],
             "hovertemplate": "step %{x}, layer %{y}: ‖Δ‖ = %{z:.3f}<extra></extra>"}
    shapes = []
    if c.first_diverging is not None:
        x = c.first_diverging - 0.5
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": "#111827", "width": 1, "dash": "dot"}})
    return figure([trace], f"‖residual({c.labels[0]}) − residual({c.labels[1]})‖ per layer, newest position",
                  height=320, xaxis={"title": {"text": "step"}}, yaxis={"title": {"text": "layer"}}, shapes=shapes)


def commitment_strip_html(pieces: list[str], layers: list[int | None], num_layers: int) -> str:
    """The generated tokens, each with the layer from which the logit lens already said it ("decided at
    layer 21 of 29", with the lens's early-layer caveat); None where the lens was not computed."""
    spans = []
    for k, (p, L) in enumerate(zip(pieces, layers)):
        note = "" if L is None else f"<sub style='color:#6b7280'>L{L}</sub>"
        title = "logit lens not computed" if L is None else f"decided at layer {L} of {num_layers - 1} ({LENS_NOTE})"
        spans.append(f"<span class='ii-commit' data-step='{k}' title='{esc(title)}'>{esc(show_piece(p, 16))}{note}</span>")
    return (f"<div id='commitment-strip'><span class='ii-caption'>Commitment layer (the first layer from which "
            f"the logit lens's top-1 stays the final token):</span> {' '.join(spans)}</div>")


def dla_html(a: Attribution, top: int = DLA_TOP) -> str:
    """The DLA bars as HTML, largest magnitude first; a head or MLP bar carries `data-part` ("head 5.3",
    "mlp 7"), which the page turns into "ablate it" on click."""
    parts = a.ranked()[:top]
    scale = max((abs(v) for _, v in parts), default=1.0) or 1.0
    rows = []
    for name, v in parts:
        width = 100 * abs(v) / scale / 2  # half the track each side of the axis
        side = f"left:50%;width:{width:.1f}%" if v >= 0 else f"left:{50 - width:.1f}%;width:{width:.1f}%"
        clickable = name.startswith(("head ", "mlp "))
        attrs = f' class="ii-dla-bar" data-part="{esc(name)}" role="button" title="click to ablate {esc(name)}"' \
            if clickable else ' class="ii-dla-fixed"'
        rows.append(f"<div{attrs} style='display:flex;align-items:center;cursor:{'pointer' if clickable else 'default'}'>"
                    f"<span style='width:110px;font-family:monospace'>{esc(name)}</span>"
                    f"<span style='position:relative;flex:1;height:14px;background:#f3f4f6'>"
                    f"<span style='position:absolute;{side};height:14px;background:{_color(name)}'></span></span>"
                    f"<span style='width:70px;text-align:right;font-family:monospace'>{v:+.3f}</span></div>")
    cap = f"; {esc(a.cap_note())}" if a.softcap is not None else ""
    head = (f"<div class='ii-caption'>Direct logit attribution of <b>{esc(show_piece(a.piece))}</b>: "
            f"{a.decomposed()} {a.explained:.3f} = sum of parts <span id='dla-sum'>{a.total:.3f}</span>{cap} "
            f"(top {len(parts)}; click a head or MLP to ablate it)</div>"
            f"<div class='ii-caption' id='dla-condition'>{esc(a.condition())}.</div>")
    return f"<div id='dla-bars' data-token='{a.token_id}'>{head}{''.join(rows)}</div>"


def _cell_color(v: float) -> str:
    """White at 0, red towards +1, blue towards -1 (clipped)."""
    t = max(-1.0, min(1.0, v))
    fade = int(255 * (1 - abs(t)))
    return f"rgb(255,{fade},{fade})" if t >= 0 else f"rgb({fade},{fade},255)"


def patch_table_html(s: PatchSweep) -> str:
    """The patching heatmap as a table (layer 0 at the bottom); each cell carries `data-cell` "L:p", which the
    page turns into "show this patched run" on click."""
    head = "".join(f"<th title='{esc(s.pieces[p]) if p < len(s.pieces) else p}'>"
                   f"{esc(show_piece(s.pieces[p], 6)) if p < len(s.pieces) else p}</th>" for p in s.positions)
    rows = []
    for L, row in reversed(list(zip(s.layers, s.matrix))):
        cells = "".join(f"<td class='ii-patch-cell' data-cell='{L}:{p}' style='background:{_cell_color(v)};"
                        f"width:14px;height:12px;cursor:pointer' title='layer {L}, position {p}: {v:.3f}'></td>"
                        for p, v in zip(s.positions, row))
        rows.append(f"<tr><th>{L}</th>{cells}</tr>")
    caption = (f"Patching {esc(s.point)}: logit difference recovered per layer (rows) and position (columns); "
               f"clean LD {s.clean_logit_diff:.2f}, corrupt LD {s.corrupt_logit_diff:.2f}, {s.seconds:.1f} s. "
               "Red = restores the clean answer. Click a cell to see that patched run.")
    return (f"<div id='patch-table' data-layers='{len(s.layers)}' data-positions='{len(s.positions)}'>"
            f"<div class='ii-caption'>{caption}</div><table style='border-collapse:collapse;font-size:10px'>"
            f"<tr><th>layer</th>{head}</tr>{''.join(rows)}</table></div>")


def patched_run_html(r: PatchedRun) -> str:
    """One patched run: the patch, what it recovered, the next token's top probabilities and the greedy
    continuation; `data-cell` "L:p" names the cell it came from."""
    tops = ", ".join(f"{esc(show_piece(piece, 12))} {p:.0%}" for piece, p in zip(r.top_pieces, r.top_probs))
    return (f"<div id='iv-patched-run' data-cell='{r.layer}:{r.position}'><b>{esc(r.label)}</b>: recovered "
            f"{r.recovered:.3f}; next tokens {tops}; greedy continuation: "
            f"<code>{esc(r.continuation_text)}</code></div>")
