"""Timing view: time to first token (tokenize + prefill + first sample) and time per output token.

Read from `ForwardRecord` wall times; prefill and decode colored apart.
"""

from __future__ import annotations

import statistics

import plotly.graph_objects as go

from inspector.records import ForwardRecord
from inspector.viz.common import GENERATED, PROMPT, base_layout, new_figure

CAPTION = ("Timing: the prefill processes the whole prompt in one forward (time to first token, TTFT); each "
           "decode step runs one forward for one token (time per output token, TPOT).")


def step_ms(r: ForwardRecord) -> float:
    """Wall time of one step: tokenize (prefill only) + forward + sampling."""
    return r.tokenize_ms + r.forward_ms + r.sample_ms


def timing_stats(records: list[ForwardRecord]) -> dict:
    """TTFT, last TPOT, median TPOT, decode tokens/s (None where not measured yet)."""
    if not records:
        return {"ttft_ms": None, "last_tpot_ms": None, "median_tpot_ms": None, "tok_s": None}
    decode = [step_ms(r) for r in records if r.kind == "decode"]
    med = statistics.median(decode) if decode else None
    return {"ttft_ms": step_ms(records[0]), "last_tpot_ms": decode[-1] if decode else None,
            "median_tpot_ms": med, "tok_s": 1000.0 / med if med else None}


def timing_chart(records: list[ForwardRecord]) -> go.Figure:
    """Bars per step: forward and sampling stacked, prefill blue and decode green."""
    steps = [r.step for r in records]
    fwd = [r.tokenize_ms + r.forward_ms for r in records]
    smp = [r.sample_ms for r in records]
    colors = [PROMPT if r.kind == "prefill" else GENERATED for r in records]
    text = [f"{r.n_new} tok" if r.kind == "prefill" else "" for r in records]
    fig = new_figure()
    fig.add_bar(x=steps, y=fwd, name="forward (+ tokenize)", marker_color=colors, text=text,
                hovertemplate="step %{x}<br>forward %{y:.1f} ms<extra></extra>")
    fig.add_bar(x=steps, y=smp, name="sampling", marker_color="#f59e0b",
                hovertemplate="step %{x}<br>sampling %{y:.2f} ms<extra></extra>")
    st = timing_stats(records)
    if st["median_tpot_ms"]:
        fig.add_hline(y=st["median_tpot_ms"], line={"dash": "dot", "color": GENERATED},
                      annotation_text=f"median TPOT {st['median_tpot_ms']:.1f} ms")
    fig.update_xaxes(title={"text": "step (0 = prefill → TTFT; then decode steps → TPOT)"})
    fig.update_yaxes(title={"text": "ms"})
    ttft = f"TTFT {st['ttft_ms']:.0f} ms" if st["ttft_ms"] is not None else ""
    return base_layout(fig, f"Time per step: {ttft}", height=300, barmode="stack",
                       legend={"orientation": "h", "y": -0.3})
