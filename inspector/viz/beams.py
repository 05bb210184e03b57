"""Beam search as a tree that grows step by step: every candidate a live beam spawned, which survived.

`beam_tree(rec, upto=None)` places step t's candidates at x = t, ranked by cumulative log-probability
(best on top), each linked to the beam it continued. Live beams (kept for the next step) are green, those
that entered the finished hypotheses are blue diamonds, dropped candidates grey; the best hypothesis's
path is the thick orange line. `upto` shows the tree as it stood after that step. `beam_table_html(rec)`
lists the finished hypotheses, best first, with log-probability and length-penalised score. Pure
functions of a `BeamRecord`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.generation.beam_tree import FINISHED, RUNNING, BeamRecord
from inspector.viz.common import CHOSEN, GENERATED, PROMPT, REMOVED, esc, figure, show_piece

COLORS = {RUNNING: GENERATED, FINISHED: PROMPT}


def beam_tree(rec: BeamRecord, upto: int | None = None) -> go.Figure:
    """Nodes by (step, rank), edges to their parents; the chosen output highlighted (module docstring)."""
    steps = rec.steps if upto is None else rec.steps[:upto + 1]
    pos = {n.id: (n.step, -n.rank) for nodes in steps for n in nodes}
    chosen = set(rec.path(rec.hypotheses[0].node)) if rec.hypotheses and upto is None else set()
    edge_x: list[float | None] = []
    edge_y: list[float | None] = []
    best_x: list[float | None] = []
    best_y: list[float | None] = []
    for nodes in steps:
        for n in nodes:
            px, py = pos.get(n.parent, (n.step - 1, 0.0))
            xs, ys = (best_x, best_y) if n.id in chosen else (edge_x, edge_y)
            xs += [px, n.step, None]
            ys += [py, -n.rank, None]
    nodes = [n for s in steps for n in s]
    root = dict(type="scatter", mode="markers+text", x=[-1], y=[0], text=["prompt"], textposition="middle left",
                marker={"size": 11, "color": "#111827", "symbol": "square"}, hoverinfo="skip", showlegend=False)
    traces = [
        dict(type="scatter", mode="lines", x=edge_x, y=edge_y, line={"color": "#cbd5e1", "width": 1},
             hoverinfo="skip", showlegend=False),
        dict(type="scatter", mode="lines", x=best_x, y=best_y, line={"color": CHOSEN, "width": 4},
             hoverinfo="skip", name="chosen output"),
        dict(type="scatter", mode="markers+text", x=[n.step for n in nodes], y=[-n.rank for n in nodes],
             text=[esc(show_piece(n.piece, 8)) for n in nodes], textposition="middle right",
             textfont={"size": 10, "color": ["#111827" if n.status == RUNNING or n.id in chosen else "#9ca3af"
                                             for n in nodes]},
             marker={"size": 9, "color": [CHOSEN if n.id in chosen else COLORS.get(n.status, REMOVED) for n in nodes],
                     "symbol": ["diamond" if n.status == FINISHED else "circle" for n in nodes]},
             customdata=[[n.status, n.token, n.logprob] for n in nodes], showlegend=False,
             hovertemplate="%{text} (id %{customdata[1]})<br>cumulative log-prob %{customdata[2]:.3f}"
                           "<br>%{customdata[0]}"
                           "<extra></extra>"),
        root,
    ]
    shown = len(steps)
    title = (f"Beam search, {rec.num_beams} beams: step {shown} of {len(rec.steps)}" if upto is not None
             else f"Beam search, {rec.num_beams} beams, {len(rec.steps)} steps: the chosen output in orange")
    return figure(traces, title, 120 + 28 * 2 * rec.num_beams,
                  xaxis={"title": {"text": "generated token"}, "dtick": 1, "range": [-1.8, max(1, len(rec.steps)) + 0.5]},
                  yaxis={"title": {"text": "candidate rank"}, "showticklabels": False}, legend={"orientation": "h", "y": -0.2})


def beam_table_html(rec: BeamRecord) -> str:
    """Finished hypotheses, best first: text, tokens, log-probability, score."""
    rows = "".join(
        f'<tr data-rank="{i}"{" class=ii-chosen" if i == 0 else ""}><td>{i + 1}</td><td>{esc(h.text)}</td>'
        f'<td>{len(h.token_ids)}</td><td>{h.logprob:.3f}</td><td>{h.score:.3f}</td></tr>'
        for i, h in enumerate(rec.hypotheses))
    return (f'<table id="beam-table" class="ii-table" data-beams="{rec.num_beams}"><thead><tr><th>#</th><th>text</th>'
            '<th>tokens</th><th>log-prob (sum over its tokens)</th><th>score (log-prob / tokens^length penalty)</th>'
            '</tr></thead>'
            f'<tbody>{rows}</tbody></table><div class="ii-kv">length penalty {rec.length_penalty:g} · '
            f'early stopping {str(rec.early_stopping).lower()} · finished: {esc(rec.finish)}</div>')
