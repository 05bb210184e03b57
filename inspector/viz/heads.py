"""Views of the head atlas: the layers x heads map, a head's pattern on the probe beside one on a run, the
ablation comparison, a run's next-token distribution with heads off, and the legend of the four roles.

Pure functions of `inspector.analysis.head_findings` data (no torch, no gradio). A map cell carries its head
as "L.H" in `customdata` for the page to act on (show its patterns, ablate it).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from inspector.analysis.head_findings import (ROLE_NAMES, ROLES, HeadAblation, HeadAtlas, HeadPattern, Probe,
                                             RunAblation)
from inspector.viz.common import (BLUES, CHOSEN, GENERATED, GRID, PROMPT, SPECIAL, esc, figure, position_ticks,
                                  show_piece)

SINK = "#6b7280"  # grey: attention parked on position 0
ROLE_COLORS = {"previous_token": PROMPT, "first_token": SINK, "duplicate_token": SPECIAL, "induction": CHOSEN}
SHADE_FLOOR = 0.15  # a score of 0 is drawn this far from white towards its role's colour


def _mix(color: str, t: float) -> str:
    """`color` (#rrggbb) mixed with white: t = 0 white, 1 the colour."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 + (c - 255) * t):02x}" for c in rgb)


def _role_colorscale() -> list[list]:
    """Four bands of z: band r = [r, r + 1) runs from a pale to the full colour of ROLES[r] (z scaled to 0..1)."""
    scale, n = [], len(ROLES)
    for r, role in enumerate(ROLES):
        lo, hi = r / n, (r + 1) / n - 1e-6
        scale += [[lo, _mix(ROLE_COLORS[role], SHADE_FLOOR)], [hi, ROLE_COLORS[role]]]
    scale[-1][0] = 1.0
    return scale


def atlas_figure(a: HeadAtlas) -> go.Figure:
    """Layers (rows, layer 0 at the bottom) x heads: each head coloured by its strongest role, shaded by that
    score; hover shows all four scores."""
    stack = np.stack([a.scores[r] for r in ROLES])  # (4, layers, heads)
    best = stack.argmax(axis=0)  # (layers, heads)
    top = np.take_along_axis(stack, best[None], axis=0)[0]
    z = best + np.clip(top, 0.0, 0.999)  # band of the role, shade by its score
    L, H = best.shape
    text = [[f"head {i}.{h}: strongest {ROLE_NAMES[ROLES[best[i, h]]]}<br>"
             + "<br>".join(f"{ROLE_NAMES[r]} {a.scores[r][i, h]:.3f}" for r in ROLES) for h in range(H)] for i in range(L)]
    trace = {"type": "heatmap", "z": z.tolist(), "x": list(range(H)), "y": list(range(L)), "zmin": 0, "zmax": len(ROLES),
             "colorscale": _role_colorscale(), "text": text, "customdata": [[f"{i}.{h}" for h in range(H)] for i in range(L)],
             "hovertemplate": "%{text}<extra>click for its patterns</extra>", "xgap": 1, "ygap": 1,
             "colorbar": {"tickvals": [r + 0.5 for r in range(len(ROLES))], "ticktext": [ROLE_NAMES[r] for r in ROLES],
                          "thickness": 12, "title": {"text": "strongest role<br>(darker: higher)"}}}
    p = a.probe
    counts = ", ".join(f"{int((best == r).sum())} {ROLE_NAMES[role].split(' (')[0]}" for r, role in enumerate(ROLES))
    title = (f"Where each head's attention goes: its largest of four scores on {p.count} sequences of {p.n} random "
             f"tokens repeated once (seed {p.seed}); of the {L * H} heads, largest {counts}")
    return figure([trace], title, height=max(280, 14 * L + 120), xaxis={"title": {"text": "head"}, "dtick": 1},
                  yaxis={"title": {"text": "layer"}, "dtick": 1 if L <= 32 else None})


def _pattern_trace(hp: HeadPattern, axis: str) -> dict:
    z = hp.pattern.astype(np.float32).copy()
    T = z.shape[0]
    z[np.triu_indices(T, 1)] = np.nan  # the future: never attended
    labels = [show_piece(p, 10) for p in hp.pieces[:T]]
    text = [[f"query {i} {esc(labels[i])} → key {j} {esc(labels[j])}" for j in range(T)] for i in range(T)]
    return {"type": "heatmap", "z": z.tolist(), "x": list(range(T)), "y": list(range(T)), "zmin": 0.0, "zmax": 1.0,
            "colorscale": BLUES, "text": text, "hovertemplate": "%{text}<br>weight %{z:.3f}<extra></extra>",
            "xaxis": f"x{axis}", "yaxis": f"y{axis}", "showscale": False, "showlegend": False,
            "colorbar": {"title": {"text": "weight"}, "thickness": 12}}


def pattern_pair_figure(probe: HeadPattern, run: HeadPattern | None = None) -> go.Figure:
    """One head's pattern on the probe (left; dashed lines where the repeat starts) beside its pattern on a run
    (right; the probe's alone, the whole width, without one)."""
    traces = [_pattern_trace(probe, "")] + ([_pattern_trace(run, "2")] if run is not None else [])
    traces[-1]["showscale"] = True
    shapes = []
    if probe.repeat_from is not None:
        s, end = probe.repeat_from - 0.5, probe.pattern.shape[0] - 0.5
        line = {"type": "line", "xref": "x", "yref": "y", "line": {"color": CHOSEN, "width": 1, "dash": "dash"}}
        shapes = [{**line, "x0": -0.5, "x1": end, "y0": s, "y1": s}, {**line, "x0": s, "x1": s, "y0": -0.5, "y1": end}]

    def axes(hp: HeadPattern, domain: list[float], anchor: str) -> tuple[dict, dict]:
        ticks = position_ticks([f"{i}:{show_piece(p, 6)}" for i, p in enumerate(hp.pieces[:hp.pattern.shape[0]])])
        x = {**GRID, "domain": domain, "anchor": anchor, "title": {"text": f"key: {hp.what}"}, "tickangle": -60, **ticks}
        y = {**GRID, "anchor": anchor.replace("y", "x"), "autorange": "reversed", "title": {"text": "query"}, **ticks}
        return x, y

    if run is None:
        x1, y1 = axes(probe, [0.0, 1.0], "y")
        title = (f"Head {probe.layer}.{probe.head}: its attention on the probe (the repeat starts at the dashed "
                 "line)")
        return figure(traces, title, 440, xaxis=x1, yaxis=y1, shapes=shapes, margin={"b": 90})
    x1, y1 = axes(probe, [0.0, 0.45], "y")
    x2, y2 = axes(run, [0.55, 1.0], "y2")
    title = (f"Head {probe.layer}.{probe.head}: its attention on the probe (left; the repeat starts at the dashed "
             f"line) and on {run.what} (right)")
    return figure(traces, title, 440, xaxis=x1, yaxis=y1, xaxis2=x2, yaxis2=y2, shapes=shapes,
                  margin={"b": 90})


def ablation_figure(ab: HeadAblation) -> go.Figure:
    """Loss per copy of the probe: no head off, the top-k heads of the role off, k random heads off."""
    labels = [r.label if r.heads else "no head off" for r in ab.rows]
    heads = ["<br>".join(", ".join(f"{L}.{h}" for L, h in r.heads[i:i + 6]) for i in range(0, len(r.heads), 6))
             or "—" for r in ab.rows]
    traces = [{"type": "bar", "name": name, "x": labels, "y": [getattr(r, attr) for r in ab.rows], "customdata": heads,
               "marker": {"color": color}, "hovertemplate": f"{name}: %{{y:.3f}} nats<br>heads off: %{{customdata}}<extra></extra>"}
              for name, attr, color in (("first copy", "loss_first", PROMPT), ("repeated copy", "loss_repeat", GENERATED))]
    title = (f"Loss on the probe without the top {ab.k} {ROLE_NAMES[ab.role]} heads, beside {ab.k} random heads "
             f"(seed {ab.seed}): the repeated copy is predictable only by copying from the first")
    return figure(traces, title, 340, barmode="group", xaxis={"title": {"text": "heads zeroed"}},
                  yaxis={"title": {"text": "mean loss (nats)"}, "rangemode": "tozero"},
                  legend={"orientation": "h", "y": 1.02, "x": 0, "yanchor": "bottom"})


def run_ablation_figure(r: RunAblation, random: RunAblation | None = None) -> go.Figure:
    """The newest step's most likely next tokens in the run as it was and in the run with the heads off (and,
    given `random`, in the run with as many random heads off, made from the same run as it was)."""
    series = [("as it was", r.top_before, PROMPT), (r.label, r.top_after, CHOSEN)]
    if random is not None:
        series.append((random.label, random.top_after, SINK))
    traces = []
    for name, top, color in series:
        traces.append({"type": "bar", "orientation": "h", "name": name, "y": [show_piece(p, 14) for p, _ in top][::-1],
                       "x": [v for _, v in top][::-1], "marker": {"color": color},
                       "hovertemplate": "%{y}: %{x:.3f}<extra>" + esc(name) + "</extra>"})
    title = (f"Next token at step {r.step_after} with {r.label}, beside step {r.step_before} as it was "
             f"({_context(r)}): {show_piece(r.token_piece)!r} {r.token_prob_before:.3f} → {r.token_prob_after:.3f}")
    if random is not None:
        title += f"; with {random.label} ({_context(random)}): {random.token_prob_after:.3f}"
    # the legend inside the plot, bottom right, where the least likely tokens' short bars leave room: above the
    # plot a legend of three long names wraps into the title of a half-width figure
    return figure(traces, title, 360 + 60 * (random is not None), barmode="group",
                  xaxis={"title": {"text": "probability"}, "range": [0, 1]},
                  yaxis={"title": {"text": "next token"}, "automargin": True},
                  legend={"x": 0.99, "xanchor": "right", "y": 0.01, "yanchor": "bottom",
                          "bgcolor": "rgba(255,255,255,0.85)"})


def _context(r: RunAblation) -> str:
    """What the ablated run's newest step predicts from, against the run as it was."""
    if r.same_context:
        return "the same tokens before it"
    if r.first_diverging is not None:
        return f"other tokens before it: the runs part at step {r.first_diverging}"
    return f"a run that stopped at step {r.step_after}"


def legend_text(probe: Probe) -> str:
    """One sentence per role, true to the scores' definitions and naming the probe they were measured on."""
    n, at = probe.n, f"{probe.count} sequences of {probe.n} random tokens, each repeated once (seed {probe.seed})"
    bos = " after a BOS" if probe.prefix else ""
    return "\n".join([
        f"Scores measured on {at}{bos}; each is the share of a head's attention (0 to 1) that goes to one place, "
        "averaged over positions and sequences; a head is coloured by its largest, however small (a pale cell: all "
        "four are low). They measure where attention goes, not what the head writes.",
        "- previous-token: from each position to the token just before it (i → i−1, every position after the first).",
        "- first-token (attention sink): from each position to the first position (i → 0), where a head with nothing "
        "to read parks its attention (Xiao et al. 2023). Random tokens give many heads nothing to read, so this "
        "colour means idle on this probe, not a head whose job is the sink (the map's title counts them).",
        f"- duplicate-token: from each token of the repeated copy to the same token in the first copy (i → i−{n}).",
        f"- induction: from each token of the repeated copy to the token that followed its earlier copy "
        f"(i → i−{n - 1}): the prefix-matching half of an induction head (Olsson et al. 2022). The other half, "
        "copying that token into the prediction, is not in the score: Ablate tests it (the repeated copy's loss "
        "without the heads).",
    ])
