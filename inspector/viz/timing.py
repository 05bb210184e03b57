"""Timing view: time to first token (tokenize + prefill + first sample) and time per output token; for a
mixture of experts, the weight bytes each step read.

Read from `ForwardRecord` wall times: `forward_ms` is the forward as the session ran it, with its recorder (a
decode step's recorder only keeps references, reduced after the timer; a long prefill's computes its norms
layer by layer inside it), without the logit lens or any drawing; `sample_ms` the draw. Prefill and decode
colored apart. `weights_read_chart` reads the records' routing (which experts each step's tokens went to) and
the byte sizes the caller gives (the page: `inspector.ui.views.timing.weights_read_sizes`, from the model's
tensor inventory: the shared weights, one expert of one layer, every weight held).
"""

from __future__ import annotations

import statistics

import plotly.graph_objects as go

from inspector.session.records import ForwardRecord
from inspector.viz.common import GENERATED, PROMPT, figure

CAPTION = ("Timing: the prefill processes the whole prompt in one forward; with tokenizing and the first draw "
           "that is the time to first token (TTFT). Each decode step runs one forward for one token; its forward "
           "+ draw is the time per output token (TPOT). Bars are wall clock of each forward as the page ran it, "
           "recorder on, without the logit lens or the page's drawing.")


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
    traces = [
        dict(type="bar", x=steps, y=fwd, name="forward (+ tokenize in the prefill)", marker={"color": colors},
             text=text, hovertemplate="step %{x}<br>forward (+ tokenize) %{y:.1f} ms<extra></extra>"),
        dict(type="bar", x=steps, y=smp, name="sampling", marker={"color": "#f59e0b"},
             hovertemplate="step %{x}<br>sampling %{y:.2f} ms<extra></extra>"),
    ]
    st = timing_stats(records)
    shapes, notes = [], []
    if st["median_tpot_ms"]:
        y = st["median_tpot_ms"]
        shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y,
                       "line": {"dash": "dot", "color": GENERATED}})
        notes.append({"xref": "paper", "yref": "y", "x": 1, "y": y, "xanchor": "right", "yanchor": "bottom",
                      "text": f"median TPOT {y:.1f} ms", "showarrow": False})
    ttft = f"TTFT {st['ttft_ms']:.0f} ms" if st["ttft_ms"] is not None else ""
    return figure(traces, f"Time per step: {ttft}", 300, barmode="stack", legend={"orientation": "h", "y": -0.3},
                  shapes=shapes, annotations=notes,
                  xaxis={"title": {"text": "step (0 = prefill → TTFT; then decode steps → TPOT)"}},
                  yaxis={"title": {"text": "ms"}})


def experts_read(r: ForwardRecord) -> list[int]:
    """Per layer, the distinct experts a mixture-of-experts forward's positions went to (the experts it read)."""
    return [len(set(r.routing.expert_ids[layer].ravel().tolist())) for layer in range(r.routing.expert_ids.shape[0])]


def weights_read_chart(records: list[ForwardRecord], shared_bytes: int, bytes_per_expert: int,
                       all_bytes: int) -> go.Figure:
    """A mixture of experts' weight bytes read per step: the shared weights plus, in every layer, the distinct
    experts the step's tokens went to (from the records' routing), against every weight held (`all_bytes`)."""
    steps = [r.step for r in records]
    shared = [shared_bytes / 2**20] * len(records)
    experts = [sum(experts_read(r)) * bytes_per_expert / 2**20 for r in records]
    colors = [PROMPT if r.kind == "prefill" else GENERATED for r in records]
    traces = [
        dict(type="bar", x=steps, y=shared, name="shared weights", marker={"color": "#9ca3af"},
             hovertemplate="step %{x}<br>shared %{y:.1f} MiB<extra></extra>"),
        dict(type="bar", x=steps, y=experts, name="chosen experts", marker={"color": colors},
             customdata=[sum(experts_read(r)) for r in records],
             hovertemplate="step %{x}<br>%{customdata} experts over the layers: %{y:.1f} MiB<extra></extra>"),
    ]
    held = all_bytes / 2**20
    line = {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": held, "y1": held,
            "line": {"dash": "dot", "color": "#6b7280"}}
    note = {"xref": "paper", "yref": "y", "x": 1, "y": held, "xanchor": "right", "yanchor": "bottom",
            "showarrow": False, "text": f"every weight held: {held:,.0f} MiB"}
    return figure(traces, "Weights read per step: shared + chosen experts", 300, barmode="stack",
                  shapes=[line], annotations=[note], legend={"orientation": "h", "y": -0.3},
                  xaxis={"title": {"text": "step (0 = prefill: every prompt token's experts)"}},
                  yaxis={"title": {"text": "weights read (MiB)"}, "rangemode": "tozero"})
