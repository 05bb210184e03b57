"""The sampling chain as a waterfall: raw logits through every stage the draw ran to the final distribution.

`chain_waterfall(sample)` draws, for the top candidates by raw logit (the chosen token always among them),
their probability after each stage in the order the stages ran (raw softmax, then e.g. repetition penalty,
grammar, temperature, top-k, top-p, min-p, then the final distribution drawn from): a token a stage
removes drops to 0 there (grey); the chosen token is the thick orange line. Above each stage: how many
tokens it removed or moved and the probability mass it removed. `chain_table_html(sample)` lists the same
per stage with the top tokens before and after it, and the most likely tokens it masked (for a grammar:
what the model wanted most that the grammar forbade). In a family with a final logit soft-cap (Gemma 2)
the model's own cap comes first, as a stage of its own: the first column is then the distribution of the
logits before the cap, the second after it (the "raw" logits the chain reads). Pure functions of a
`SampleRecord`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.session.records import SampleRecord
from inspector.viz.common import CHOSEN, GENERATED, REMOVED, esc, figure, show_piece

CAPTION = ("Every stage between the logits and the token, in the order it runs: penalties and bans edit logits, "
           "a grammar masks what the constraint forbids, temperature rescales, top-k / top-p / min-p cut the tail; "
           "the last column is the distribution the seeded draw picks from.")


def _columns(sample: SampleRecord) -> list[str]:
    if _capped(sample):
        return ["before soft-cap", sample.softcap_stat.name, *sample.stages, "final"]
    return ["raw", *sample.stages, "final"]


def _capped(sample: SampleRecord) -> bool:
    """Whether the record carries the model's soft-cap stage (with every candidate's probability before it)."""
    return sample.softcap_stat is not None and all(c.prob_precap is not None for c in sample.candidates)


def chain_waterfall(sample: SampleRecord, top_n: int = 8, preview: bool = False) -> go.Figure:
    """Lines per candidate over the stages (see the module docstring); `preview`: a draw the sliders asked
    for from stored logits, not the step's own."""
    cols = _columns(sample)
    x = list(range(len(cols)))
    cands = sample.candidates[:top_n]
    if sample.token_id not in [c.id for c in cands]:
        cands = cands + [c for c in sample.candidates if c.id == sample.token_id]
    traces = []
    for c in cands:
        stage = c.stage_probs if len(c.stage_probs) == len(sample.stages) else [c.prob_raw] * len(sample.stages)
        ys = [c.prob_raw, *stage, c.prob_final]
        if _capped(sample):
            ys = [c.prob_precap, *ys]
        chosen = c.id == sample.token_id
        alive = ys[-1] > 0 or chosen
        traces.append(dict(
            type="scatter", mode="lines+markers", x=x, y=ys, name=f"{show_piece(c.piece, 12)} ({c.id})",
            line={"color": CHOSEN if chosen else (GENERATED if alive else REMOVED), "width": 4 if chosen else 1.5},
            marker={"size": [9 if y == 0 else 6 for y in ys], "symbol": ["x" if y == 0 else "circle" for y in ys]},
            hovertemplate=f"{esc(show_piece(c.piece, 20))} (id {c.id})<br>%{{y:.4f}}<extra></extra>"))
    notes = []
    first = 1
    if _capped(sample):
        notes.append({"x": 1, "y": 1.02, "yref": "paper", "text": f"{sample.softcap_stat.moved:,} moved<br>none removed",
                      "showarrow": False, "font": {"size": 10, "color": "#4b5563"}, "yanchor": "bottom"})
        first = 2
    for i, st in enumerate(sample.stage_stats, start=first):
        bits = [f"{st.allowed:,} left"]
        if st.removed:
            bits.append(f"−{st.removed:,} removed ({st.mass_removed:.0%} mass)")
        if st.moved:
            bits.append(f"{st.moved:,} moved")
        notes.append({"x": i, "y": 1.02, "yref": "paper", "text": "<br>".join(bits), "showarrow": False,
                      "font": {"size": 10, "color": "#4b5563"}, "yanchor": "bottom"})
    what = "Preview (no model rerun): would pick" if preview else "Sampling chain: picked"
    title = f"{what} {show_piece(sample.token_piece, 14)} (id {sample.token_id}) · seed {sample.params.seed}"
    return figure(traces, title, 360, annotations=notes, showlegend=True,
                  legend={"orientation": "h", "y": -0.25}, margin={"l": 60, "r": 20, "t": 90, "b": 60},
                  xaxis={"tickmode": "array", "tickvals": x, "ticktext": cols, "range": [-0.3, len(cols) - 0.7],
                         "title": {"text": "stage of the sampling chain, in order"}},
                  yaxis={"title": {"text": "probability"}, "rangemode": "tozero"})


def _tokens(tops) -> str:
    return ", ".join(f"{esc(show_piece(t.piece, 10))} {t.prob:.2f}" for t in tops) or "—"


def masked_wanted(sample: SampleRecord, stage: int, n: int = 5) -> list[str]:
    """Pieces of the most likely candidates (by raw logit) that stage `stage` took to probability 0."""
    out = []
    for c in sample.candidates:
        before = c.prob_raw if stage == 0 else c.stage_probs[stage - 1]
        if len(c.stage_probs) > stage and before > 0 and c.stage_probs[stage] == 0:
            out.append(show_piece(c.piece, 10))
    return out[:n]


def _softcap_row(sample: SampleRecord) -> str:
    """The model's soft-cap as the first row of the chain table ("" without one)."""
    st = sample.softcap_stat
    if st is None:
        return ""
    return (f'<tr data-stage="softcap" class="ii-model-stage"><td><b>{esc(st.name)}</b> <small>(in the model)</small>'
            f'</td><td>{st.allowed:,} / {sample.vocab_size:,}</td><td>0</td><td>{st.moved:,}</td><td>0.0%</td><td>—</td>'
            f'<td>{_tokens(st.top_before)}</td><td>{_tokens(st.top_after)}</td></tr>')


def chain_table_html(sample: SampleRecord) -> str:
    """One row per stage: tokens left of the vocabulary, removed, moved, mass removed, masked, top before/after."""
    if not sample.stage_stats and sample.softcap_stat is None:
        return ('<div id="chain-table" class="ii-kv">Greedy with no processors: the most likely token '
                f'is taken (seed {sample.params.seed} is not used).</div>')
    rows = [_softcap_row(sample)]
    for i, st in enumerate(sample.stage_stats):
        masked = masked_wanted(sample, i) if len(sample.candidates[0].stage_probs) == len(sample.stages) else []
        rows.append(
            f'<tr data-stage="{esc(st.name)}"><td><b>{esc(st.name)}</b></td><td>{st.allowed:,} / {sample.vocab_size:,}</td>'
            f'<td>{st.removed:,}</td><td>{st.moved:,}</td><td>{st.mass_removed:.1%}</td>'
            f'<td>{esc(", ".join(masked)) or "—"}</td><td>{_tokens(st.top_before)}</td><td>{_tokens(st.top_after)}</td></tr>')
    return ('<table id="chain-table" class="ii-table"><thead><tr><th>stage</th><th>tokens left</th><th>removed</th>'
            '<th>moved</th><th>mass removed</th><th>wanted but removed</th><th>top before</th><th>top after</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<div class="ii-kv">seed {sample.params.seed} · picked <b>{esc(show_piece(sample.token_piece, 20))}'
            f'</b> (id {sample.token_id})</div>')
