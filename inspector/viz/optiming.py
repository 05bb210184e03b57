"""Per-operation timing view: one step's time per operation and per layer, with bytes, GB/s and the roofline.

Pure functions of an `OpTiming` (`inspector.session.op_timing.time_step_ops`) and the machine's measured
`Peaks` (the Serving lab's roofline peaks; None when not measured):
- `op_table_html`: per operation (summed over the layers): ms, share of the step, MiB read, GB/s and that
  rate as a share of the measured read bandwidth, GFLOP/s, FLOPs per byte;
- `op_layers_html`: per layer × operation, ms, shaded by size (where in the stack the time goes);
- `op_roofline`: every operation as a point at (FLOPs per byte, achieved GFLOP/s) under the two roofs.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.serving.results import Peaks
from inspector.session.records import OpTiming
from inspector.viz.common import CHOSEN, PROMPT, esc, figure
from inspector.viz.serving import roof_trace

CAPTION = ("Per operation: press Time operations to run a step's forward again with a timer at every trace "
           "point (median of a few runs; the step's own records are not changed). Each operation reads its "
           "weights (and attention its K and V): bytes ÷ time is the bandwidth it reached, shown against the "
           "machine's measured read bandwidth. A decode step's weight products do 2 FLOPs per weight read (0.5 "
           "FLOP/byte in fp32, 1 in bf16), left of the ridge point of current CPUs and GPUs, so bandwidth sets their "
           "time; the plot shows where this machine's ridge lies.")


def _head(t: OpTiming) -> str:
    return (f'{t.kind} step {t.step}: {t.tokens} new position{"s" if t.tokens != 1 else ""} after {t.context} cached, '
            f'{t.device}, {t.dtype}; sum of the operations\' medians over {t.repeats} runs {t.seconds * 1e3:.2f} ms')


def op_table_html(t: OpTiming, peaks: Peaks | None) -> str:
    """One row per operation, summed over the layers; the bandwidth share needs `peaks`."""
    total = t.seconds or 1.0
    rows = []
    for r in t.totals:
        share = f" ({r.gb_per_s / peaks.gb_per_s:.0%})" if peaks is not None and peaks.gb_per_s > 0 else ""
        rows.append(f'<tr data-op="{esc(r.op)}"><td>{esc(r.op)}</td><td>{r.seconds * 1e3:.3f}</td>'
                    f'<td>{r.seconds / total:.0%}</td><td>{r.bytes_read / 2**20:.2f}</td>'
                    f'<td>{r.gb_per_s:.1f}{share}</td><td>{r.gflops_per_s:.1f}</td><td>{r.intensity:.2f}</td></tr>')
    roof = (f"measured read bandwidth {peaks.gb_per_s:.1f} GB/s, matmul {peaks.gflops_per_s:.0f} GFLOP/s ({esc(peaks.dtype)})"
            if peaks is not None else "machine peaks not measured")
    return (f'<div id="op-timing-head" class="ii-kv" data-step="{t.step}">{esc(_head(t))} · {roof}</div>'
            '<table id="op-table" class="ii-table"><thead><tr><th>operation (all layers)</th><th>ms</th>'
            '<th>share</th><th>MiB read</th><th>GB/s (of measured)</th><th>GFLOP/s</th><th>FLOPs/byte</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def op_layers_html(t: OpTiming) -> str:
    """Layers × block operations, ms each, the cell shaded by its share of the largest."""
    ops = list(dict.fromkeys(r.op for r in t.rows if r.layer is not None))
    cells: dict[tuple[int, str], float] = {}
    for r in t.rows:
        if r.layer is not None:
            cells[(r.layer, r.op)] = cells.get((r.layer, r.op), 0.0) + r.seconds
    top = max(cells.values(), default=0.0) or 1.0
    layers = sorted({layer for layer, _ in cells})
    body = []
    for layer in layers:
        tds = []
        for op in ops:
            s = cells.get((layer, op), 0.0)
            tds.append(f'<td style="background:rgba(59,130,246,{0.08 + 0.6 * s / top:.2f})">{s * 1e3:.3f}</td>')
        body.append(f'<tr><th>{layer}</th>{"".join(tds)}</tr>')
    head = "".join(f"<th>{esc(op)}</th>" for op in ops)
    return (f'<table id="op-layers" class="ii-table"><thead><tr><th>layer</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table><div class="ii-caption">ms per layer and operation</div>')


def op_roofline(t: OpTiming, peaks: Peaks | None) -> go.Figure:
    """Each operation (summed over layers) at (FLOPs per byte, GFLOP/s), log-log, under the measured roofs."""
    pts = [r for r in t.totals if r.flops > 0 and r.bytes_read > 0 and r.seconds > 0]
    traces = [dict(type="scatter", mode="markers+text", name="operations", x=[r.intensity for r in pts],
                   y=[r.gflops_per_s for r in pts], text=[r.op for r in pts], textposition="top center",
                   marker={"color": [CHOSEN if r.op in ("LM head", "sampling") else PROMPT for r in pts], "size": 10},
                   customdata=[[r.seconds * 1e3, r.gb_per_s] for r in pts],
                   hovertemplate="%{text}<br>%{x:.2f} FLOPs/byte<br>%{y:.2f} GFLOP/s, %{customdata[1]:.1f} GB/s"
                                 "<br>%{customdata[0]:.3f} ms<extra></extra>")]
    xs = [r.intensity for r in pts] or [1.0]
    lo, hi = min(xs) / 3, max(xs) * 3
    title = f"Operations on the roofline ({t.kind} step {t.step})"
    if peaks is not None and peaks.gb_per_s > 0:
        traces.insert(0, roof_trace(peaks, min(lo, peaks.ridge / 10), max(hi, peaks.ridge * 3), "roof (measured)"))
        title += f": peaks {peaks.gflops_per_s:.0f} GFLOP/s, {peaks.gb_per_s:.1f} GB/s"
    return figure(traces, title, 380, xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte read)"}},
                  yaxis={"type": "log", "title": {"text": "achieved GFLOP/s"}}, legend={"orientation": "h", "y": -0.3})
