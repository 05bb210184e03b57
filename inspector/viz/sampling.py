"""Sampling view: the top-N candidates followed through temperature, top-k, top-p, min-p, to the pick.

Draws a `SampleRecord` (from a step, or from `Session.preview_sample` when a slider moves): raw
probability, after temperature (and every stage before it: penalties, bans, a grammar), final (renormalised
over survivors); removed tokens greyed, each naming the stage that removed it; the chosen token highlighted.
`CAPTION` is the Sampling tab's, above the chain's waterfall (`inspector.viz.stages`).
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.session.records import SampleRecord
from inspector.viz.common import CHOSEN, GENERATED, REMOVED, esc, figure, show_piece

CAPTION = ("Sampling: each stage from the newest logits to the token, in order: penalties, bans and a grammar edit "
           "the logits; temperature divides them; top-k / top-p / min-p drop unlikely tokens (to 0); the survivors "
           "are renormalised and one is drawn with the seed. Temperature 0 = greedy: the top edited logit, no draw.")


def removed_by(c, stages: list[str] | None = None) -> list[str]:
    """The stage that took candidate `c` to probability 0, from its per-stage probabilities when `stages` (the
    record's, in order) are given; else which of top-k / top-p / min-p it did not survive (a token masked
    earlier, by a ban or a grammar, also fails those)."""
    if stages and len(c.stage_probs) == len(stages):
        before = c.prob_raw
        for name, prob in zip(stages, c.stage_probs):
            if before > 0 and prob == 0:
                return [name]
            before = prob
        return []
    out = []
    if not c.kept_top_k:
        out.append("top-k")
    if not c.kept_top_p:
        out.append("top-p")
    if not c.kept_min_p:
        out.append("min-p")
    return out


def sampling_bars(sample: SampleRecord, top_n: int = 20, preview: bool = False) -> go.Figure:
    """Grouped bars per candidate: raw, after temperature, final; removed greyed; chosen outlined."""
    cands = sample.candidates[:top_n]
    if sample.token_id not in [c.id for c in cands]:
        cands = cands + [c for c in sample.candidates if c.id == sample.token_id]
    x = [f"{show_piece(c.piece, 10)}<br><sub>{c.id}</sub>" for c in cands]
    by = [removed_by(c, sample.stages) for c in cands]
    removed = [bool(b) for b in by]
    chosen = [c.id == sample.token_id for c in cands]
    hover = [f"id {c.id} · logit {c.logit:.2f}" + (f"<br>removed by {', '.join(b)}" if b else "")
             for c, b in zip(cands, by)]
    t = sample.params.temperature
    before = sample.stages[:sample.stages.index("temperature")] if "temperature" in sample.stages else []
    tname = (f"after {', '.join(before)} and temperature {t:g}" if before and t > 0 else
             f"after temperature {t:g}" if t > 0 else "temperature 0 (greedy): not applied")
    traces = [
        dict(type="bar", x=x, y=[c.prob_raw for c in cands], name="raw softmax", marker={"color": "#c7d2fe"},
             hovertext=hover),
        dict(type="bar", x=x, y=[c.prob_temperature for c in cands], name=tname,
             marker={"color": ["#e5e7eb" if r else "#818cf8" for r in removed]}, hovertext=hover),
        dict(type="bar", x=x, y=[c.prob_final for c in cands], name="final (after filters, renormalised)",
             marker={"color": [CHOSEN if ch else (REMOVED if r else GENERATED) for ch, r in zip(chosen, removed)],
                     "line": {"color": ["#000" if ch else "rgba(0,0,0,0)" for ch in chosen], "width": 2}},
             hovertext=hover),
    ]
    notes = []
    if any(chosen):
        i = chosen.index(True)
        notes.append({"x": x[i], "y": max(cands[i].prob_final, cands[i].prob_raw), "yshift": 4, "ay": -18, "ax": 28,
                      "text": "would pick" if preview else "chosen", "showarrow": True, "arrowcolor": CHOSEN,
                      "font": {"color": CHOSEN, "size": 12}})
    notes += [{"x": x[i], "y": 0, "text": "✕", "showarrow": False, "yshift": -4, "font": {"color": "#9ca3af"}}
              for i, r in enumerate(removed) if r]
    what = "Preview (no model rerun)" if preview else "Sampling"
    title = f"{what}: picked {show_piece(sample.token_piece, 14)!s} (id {sample.token_id})"
    return figure(traces, title, 360, barmode="group", legend={"orientation": "h", "y": -0.3}, annotations=notes,
                  xaxis={"title": {"text": "top candidates by raw logit (piece, id)"}, "tickangle": 0},
                  yaxis={"title": {"text": "probability"}, "range": [0, 1.18]})


def sampling_info_html(sample: SampleRecord, step: int, preview_of: int | None = None) -> str:
    """Entropy, survivors, params, and the chosen (or would-be) token with stable data-id."""
    p = sample.params
    what = ("With these settings, the same seed would pick" if preview_of is not None
            else f"Step {step} chose")
    diff = ""
    if preview_of is not None and preview_of != sample.token_id:
        diff = f' <span class="ii-warn">(differs from the token actually generated, id {preview_of}: press Resample to use it)</span>'
    return (
        f'<div id="sampling-info" class="ii-kv" data-preview="{int(preview_of is not None)}">'
        f'<div>{what} <b id="sampling-chosen" data-id="{sample.token_id}">{esc(show_piece(sample.token_piece, 24))}'
        f'</b> (id {sample.token_id}){diff}</div>'
        f'<div>temperature {p.temperature:g} · top-k {p.top_k or "off"} · top-p {p.top_p:g} · '
        f'min-p {p.min_p:g} · seed {p.seed}</div>'
        f'<div>entropy {sample.entropy_raw:.2f} nats raw → {sample.entropy_final:.2f} nats final · '
        f'<span id="sampling-survivors">{sample.survivors:,}</span> of {sample.vocab_size:,} tokens survive</div></div>'
    )


def entropy_chart(records: list) -> go.Figure:
    """Each step's uncertainty: the entropy (nats) of the model's next-token distribution and of the one the
    token was drawn from (after the sampling stages), per step; records without a draw are left out."""
    steps = [r for r in records if r.sample is not None]
    x = [r.step for r in steps]
    traces = [{"type": "scatter", "mode": "lines+markers", "x": x, "y": [r.sample.entropy_raw for r in steps],
               "name": "model's distribution"},
              {"type": "scatter", "mode": "lines+markers", "x": x, "y": [r.sample.entropy_final for r in steps],
               "name": "after the sampling stages"}]
    return figure(traces, "Entropy of each step's next-token distribution", 280,
                  xaxis={"title": {"text": "step (0 = the prefill's token)"}}, yaxis={"title": {"text": "entropy (nats)"}})
