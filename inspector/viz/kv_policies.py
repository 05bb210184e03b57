"""KV-cache policy views: KL against the full cache plotted over the bytes each policy kept.

Pure builder from plain result rows (the dicts `inspector kv-eval --json` prints: policy, budget, kl_mean,
top1_agreement, kv_bytes, kv_bytes_full) to a plotly figure; no torch, no gradio.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.units import MIB
from inspector.viz.common import ATTN, CHOSEN, GENERATED, MLP, PROMPT, figure

COLORS = {"window": PROMPT, "sinks": GENERATED, "h2o": CHOSEN, "snapkv": ATTN, "int8": MLP, "int4": "#ef4444"}


def kl_bytes_figure(rows: list[dict]) -> go.Figure:
    """One line per policy: mean KL (log scale) against the KV bytes it kept, each point labelled by its
    budget and top-1 agreement; the full cache's bytes as a vertical line (KL 0 is off a log axis)."""
    traces = []
    for policy in dict.fromkeys(r["policy"] for r in rows if r["policy"] != "full"):
        mine = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["kv_bytes"])
        traces.append({"type": "scatter", "mode": "lines+markers", "name": policy,
                       "x": [r["kv_bytes"] / MIB for r in mine], "y": [max(r["kl_mean"], 1e-6) for r in mine],
                       "marker": {"color": COLORS.get(policy, "#6b7280"), "size": 8},
                       "line": {"color": COLORS.get(policy, "#6b7280")},
                       "text": [f"budget {r['budget']}, top-1 {r['top1_agreement']:.0%}" if r.get("budget")
                                else f"top-1 {r['top1_agreement']:.0%}" for r in mine],
                       "hovertemplate": "%{x:.1f} MiB, KL %{y:.4f}<br>%{text}<extra>" + policy + "</extra>"})
    full = max((r["kv_bytes_full"] for r in rows), default=0) / MIB
    return figure(traces, "KL against the full cache over the KV bytes kept", height=380,
                  xaxis={"title": {"text": "KV cache kept (MiB)"}},
                  yaxis={"title": {"text": "mean KL (nats per token)"}, "type": "log"},
                  shapes=[{"type": "line", "x0": full, "x1": full, "yref": "paper", "y0": 0, "y1": 1,
                           "line": {"dash": "dot", "color": "#6b7280"}}],
                  annotations=[{"x": full, "yref": "paper", "y": 1, "text": "full cache", "showarrow": False,
                                "xanchor": "right"}])
