"""Serving view: figures of a continuous-batching run over a paged KV cache, from `inspector.serving.results`.

Pure builders (no torch, no gradio):
- `block_grid_figure(grid)`: the pool as a grid of squares, one per block, coloured by the request that
  owns it (grey: free); a block several requests share (parallel sampling) has a black outline and lists
  them all.
- `timeline_figure(timelines)`: requests (rows) × engine steps (columns), one coloured square per state
  (waiting, prefill, decode, preempted, finished).
- `tokens_figure(steps)`: per step, prompt tokens fed (prefill rows) and decode tokens, stacked, with the
  blocks in use on a second axis.
- `roofline_figure(steps, peaks)`: each forward of the run at (FLOPs per byte, achieved GFLOP/s) on log
  axes under the machine's two roofs, min(peak GFLOP/s, peak GB/s × intensity).
- `memory_figure(bars, budget_bytes)`: weights and KV bytes of model variants (GQA against full MHA),
  stacked, against a memory budget.
- `summary_html(view, tokens, tok_s)`: one line of totals for the tab.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.serving.results import STATES, BlockGrid, MemoryBar, Peaks, RequestTimeline, ServingView, StepRecord
from inspector.units import GIB, format_bytes
from inspector.viz.common import CHOSEN, GENERATED, MLP, PROMPT, REMOVED, SPECIAL, esc, figure

# Owner colours cycle through a qualitative palette (plotly's D3 / Tableau 10).
OWNER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"]
STATE_COLORS = {"waiting": REMOVED, "prefill": PROMPT, "decode": GENERATED, "preempted": CHOSEN,
                "finished": "#6b7280"}
KIND_COLORS = {"prefill": PROMPT, "decode": GENERATED, "mixed": SPECIAL}
GRID_COLUMNS = 16

CAPTION = ("Serving: requests share one pool of fixed-size KV blocks (PagedAttention); every engine step runs "
           "ONE batched forward over the running requests (decode rows) and newly admitted ones (prefill rows), "
           "admitting a waiting request as soon as a slot and blocks free up (continuous batching). When the "
           "pool runs out, the most recently admitted running request is preempted (its blocks freed) and "
           "recomputed from its prompt and generated tokens when readmitted.")


def step_axis(n_steps: int) -> dict:
    """An engine-step x axis: one tick per step while they are few (no fractional steps)."""
    ticks = {"tickmode": "linear", "tick0": 0, "dtick": 1} if n_steps <= 24 else {"tickformat": "d"}
    return {"title": {"text": "engine step"}, **ticks}


def owner_color(request_id: int) -> str:
    return OWNER_COLORS[request_id % len(OWNER_COLORS)]


def block_grid_figure(grid: BlockGrid) -> go.Figure:
    """One square per pool block, GRID_COLUMNS to a row, block 0 top left."""
    n = len(grid.owners)
    cols = min(GRID_COLUMNS, max(n, 1))
    x = [b % cols for b in range(n)]
    y = [b // cols for b in range(n)]
    colors = [owner_color(o[0]) if o else "#f3f4f6" for o in grid.owners]
    lines = [3 if len(o) > 1 else 1 for o in grid.owners]
    line_colors = ["#111827" if len(o) > 1 else "#d1d5db" for o in grid.owners]
    text = [",".join(map(str, o)) for o in grid.owners]
    hover = [f"block {b}: " + (("shared by " if len(o) > 1 else "request ") + ", ".join(f"#{s}" for s in o)
                               if o else "free") for b, o in enumerate(grid.owners)]
    rows = max(y, default=0) + 1
    trace = dict(type="scatter", mode="markers+text", x=x, y=y, text=text, textfont={"size": 9, "color": "white"},
                 marker={"symbol": "square", "size": 26, "color": colors,
                         "line": {"width": lines, "color": line_colors}},
                 hovertext=hover, hoverinfo="text", showlegend=False)
    title = (f"KV block pool: {grid.used} of {n} blocks in use ({grid.block_size} positions each), "
             f"{grid.shared} shared")
    return figure([trace], title, 60 + 34 * rows + 40,
                  xaxis={"visible": False, "range": [-0.7, cols - 0.3]},
                  yaxis={"visible": False, "autorange": "reversed", "range": [rows - 0.5, -0.5]},
                  margin={"l": 10, "r": 10, "t": 40, "b": 10})


def timeline_figure(timelines: list[RequestTimeline]) -> go.Figure:
    """Requests × steps, one trace per state (its legend entry)."""
    traces = []
    for state in STATES:
        xs, ys, hover = [], [], []
        for t in timelines:
            for step, s in enumerate(t.states):
                if s == state:
                    xs.append(step)
                    ys.append(t.label)
                    hover.append(f"{esc(t.label)}<br>step {step}: {state}")
        traces.append(dict(type="scatter", mode="markers", name=state, x=xs, y=ys, hovertext=hover,
                           hoverinfo="text", marker={"symbol": "square", "size": 14, "color": STATE_COLORS[state]}))
    labels = [t.label for t in timelines]
    return figure(traces, "Requests over engine steps", 120 + 22 * max(len(timelines), 1),
                  xaxis={**step_axis(max((len(t.states) for t in timelines), default=0)), "rangemode": "tozero"},
                  yaxis={"type": "category", "categoryorder": "array", "categoryarray": labels[::-1],
                         "title": {"text": "request"}},
                  legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"})


def tokens_figure(steps: list[StepRecord]) -> go.Figure:
    """Tokens each forward fed (prompt vs decode), stacked, and blocks in use (right axis)."""
    x = [r.step for r in steps]
    prompt = [sum(row.num_tokens for row in r.rows if row.kind == "prefill") for r in steps]
    decode = [sum(row.num_tokens for row in r.rows if row.kind == "decode") for r in steps]
    traces = [
        dict(type="bar", x=x, y=prompt, name="prompt tokens (prefill rows)", marker={"color": PROMPT},
             hovertemplate="step %{x}: %{y} prompt tokens<extra></extra>"),
        dict(type="bar", x=x, y=decode, name="decode tokens (one per running request)", marker={"color": GENERATED},
             hovertemplate="step %{x}: %{y} decode rows<extra></extra>"),
        dict(type="scatter", mode="lines+markers", x=x, y=[r.blocks_used for r in steps], name="blocks in use",
             yaxis="y2", line={"color": MLP}, hovertemplate="step %{x}: %{y} blocks<extra></extra>"),
    ]
    return figure(traces, "Tokens per engine step", 300, barmode="stack",
                  xaxis=step_axis(len(steps)), yaxis={"title": {"text": "tokens in the forward"}},
                  yaxis2={"overlaying": "y", "side": "right", "title": {"text": "blocks"}, "rangemode": "tozero",
                          "showgrid": False},
                  legend={"orientation": "h", "y": -0.3})


def roof_trace(peaks: Peaks, lo: float, hi: float, name: str) -> dict:
    """The roof from FLOPs per byte `lo` to `hi` (log-spaced): min(compute peak, bandwidth x intensity)."""
    grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    return dict(type="scatter", mode="lines", name=name, x=grid,
                y=[min(peaks.gflops_per_s, peaks.gb_per_s * g) for g in grid],
                line={"color": "#111827", "width": 2}, hoverinfo="skip")


def roofline_figure(steps: list[StepRecord], peaks: Peaks | None) -> go.Figure:
    """This run's forwards on the roofline: x = FLOPs per byte moved, y = achieved GFLOP/s (log-log)."""
    done = [r for r in steps if r.flops and r.forward_ms > 0]
    traces = []
    for kind in ("prefill", "decode", "mixed"):
        pts = [r for r in done if r.kind == kind]
        traces.append(dict(
            type="scatter", mode="markers", name=kind, x=[r.intensity for r in pts], y=[r.gflops_per_s for r in pts],
            marker={"color": KIND_COLORS[kind], "size": [8 + 2 * len(r.rows) for r in pts], "opacity": 0.8},
            customdata=[[r.step, len(r.rows), r.gb_per_s] for r in pts],
            hovertemplate=("step %{customdata[0]}: %{customdata[1]} rows<br>%{x:.2f} FLOP/byte<br>"
                           "%{y:.1f} GFLOP/s, %{customdata[2]:.1f} GB/s<extra>" + kind + "</extra>")))
    xs = [r.intensity for r in done] or [1.0]
    lo, hi = min(xs) / 3, max(xs) * 3
    title = "Roofline: this run's forwards"
    if peaks is not None:
        traces.insert(0, roof_trace(peaks, min(lo, peaks.ridge / 10), max(hi, peaks.ridge * 10), "roof"))
        title += f" (measured peaks {peaks.gflops_per_s:.0f} GFLOP/s, {peaks.gb_per_s:.1f} GB/s)"
    return figure(traces, title, 340,
                  xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte moved, counted from the config)"}},
                  yaxis={"type": "log", "title": {"text": "achieved GFLOP/s (counted FLOPs over the measured forward)"}},
                  legend={"orientation": "h", "y": -0.3})


# How the memory calculator counts a low-bit weight (`inspector.serving.memory.WEIGHT_DTYPES`), which is not
# how the Quantization lab holds one (`inspector.quant.linear`: int8 one scale per row, int4 a scale and a
# minimum per group)
WEIGHT_FORMATS = {
    "int8": "counted as GGUF's Q8_0 blocks: 8-bit weights and one fp16 scale per 32, 8.5 bits a weight (the "
            "Quantization lab's int8 keeps one scale per row: about 8)",
    "int4": "counted as GGUF's Q4_0 blocks: 4-bit weights and one fp16 scale per 32, 4.5 bits a weight (the "
            "Quantization lab's int4-g32 keeps a scale and a minimum per 32: 5.0)",
}


def format_note(dtype: str) -> str:
    """" (how this dtype's weights are counted)" for int8 / int4; "" for a float dtype."""
    return f" ({WEIGHT_FORMATS[dtype]})" if dtype in WEIGHT_FORMATS else ""


def memory_figure(bars: list[MemoryBar], budget_bytes: int | None = None) -> go.Figure:
    """Stacked horizontal bars, weights then KV cache, one per model variant; the budget as a dashed line."""
    labels = [b.label for b in bars]
    fits = [f"{b.fits_requests} requests fit" if b.fits_requests is not None else "" for b in bars]
    traces = [
        dict(type="bar", orientation="h", y=labels, x=[b.weight_bytes / GIB for b in bars], name="weights",
             marker={"color": PROMPT}, hovertemplate="weights %{x:.2f} GiB<extra></extra>"),
        dict(type="bar", orientation="h", y=labels, x=[b.kv_bytes / GIB for b in bars], name="KV cache",
             marker={"color": GENERATED}, text=fits, textposition="outside",
             hovertemplate="KV cache %{x:.2f} GiB<extra></extra>"),
    ]
    shapes = []
    if budget_bytes:
        x = budget_bytes / GIB
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": CHOSEN, "width": 2, "dash": "dash"}})
    annotations = ([{"x": budget_bytes / GIB, "yref": "paper", "y": 1, "text": f"memory {format_bytes(budget_bytes)}",
                     "showarrow": False, "xanchor": "left", "yanchor": "bottom"}] if budget_bytes else [])
    return figure(traces, "Memory: weights + KV cache", 110 + 50 * max(len(bars), 1), barmode="stack", shapes=shapes,
                  annotations=annotations,
                  xaxis={"title": {"text": "memory (GiB)"}},
                  yaxis={"autorange": "reversed", "title": {"text": "model configuration"}},
                  legend={"orientation": "h", "y": -0.4}, margin={"l": 160, "r": 20, "t": 40, "b": 50})


def summary_html(view: ServingView, tokens: int, tok_s: float | None, peak_paged_bytes: int,
                 peak_contiguous_bytes: int) -> str:
    """Totals after the last step; data-* attributes for tests."""
    rate = f"{tok_s:.1f} tokens/s" if tok_s is not None else "-"
    done = len({s for r in view.steps for s in r.finished})
    saved = f" ({peak_contiguous_bytes / peak_paged_bytes:.1f}x the paged bytes)" if peak_paged_bytes else ""
    return (f'<div id="serving-summary" data-steps="{len(view.steps)}" data-tokens="{tokens}" '
            f'data-finished="{done}" data-blocks="{view.grid.used}">'
            f"{len(view.steps)} engine steps, {tokens} tokens generated, {rate} aggregate; "
            f"{done} of {len(view.timelines)} requests finished. KV at peak: paged {format_bytes(peak_paged_bytes)}, "
            f"contiguous caches reserved to each running request's max length {format_bytes(peak_contiguous_bytes)}"
            f"{saved}.</div>")
