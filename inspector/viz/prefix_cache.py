"""Prefix caching and chunked prefill compared: figures of `inspector.serving.prefix_compare` runs, from
`inspector.serving.results.ConfigRun` alone (no torch, no gradio).

- `table_html(runs)`: one row per configuration: TTFT (mean, p50) and TPOT (mean) in ms, the prefix cache's
  hit rate, blocks shared at the peak, prompt tokens computed, steps, wall time against plain serving, and
  whether the outputs equal plain serving's.
- `ttft_tpot_figure(runs)`: mean TTFT and mean TPOT per configuration, side by side.
"""

from __future__ import annotations

import statistics

import plotly.graph_objects as go

from inspector.serving.results import ConfigRun
from inspector.viz.common import GENERATED, PROMPT, esc, figure

CAPTION = ("Prefix caching and chunked prefill: the same requests, sharing one system prompt, served four ways "
           "by the real scheduler. With prefix caching a request's full prompt blocks are looked up by the hash "
           "of their tokens (and of the blocks before them) and reused instead of computed; chunked prefill "
           "splits a long prompt into chunks that share steps with the other requests' decodes. Decoding is greedy, "
           "so every configuration should produce the same tokens; their logits are not bit for bit the same, "
           "though (reused blocks and chunks change the shapes of the products, hence the order of the additions), "
           "and a near-tie between the top two tokens can flip one. The outputs column checks each configuration "
           "against plain serving. Times are this machine's "
           "wall clock. A block counts as "
           "shared while two requests or more hold it at once; a request that finds blocks cached after the "
           "one that wrote them has finished is a hit without sharing.")


def _mean(values: list[float]) -> float:
    return statistics.mean(values) if values else 0.0


def table_html(runs: list[ConfigRun]) -> str:
    """One row per configuration (see the module docstring)."""
    if not runs:
        return ""
    base = runs[0].wall_s or 1.0
    head = ("<tr><th>configuration</th><th>TTFT mean ms</th><th>TTFT p50 ms</th><th>TPOT mean ms</th>"
            "<th>hit rate</th><th title='blocks held by two requests or more at once'>blocks shared (peak)</th>"
            "<th>prompt tokens computed</th><th>steps</th>"
            "<th>wall s</th><th>vs plain</th><th>outputs</th></tr>")
    rows = []
    for r in runs:
        p50 = statistics.median(r.ttft_ms) if r.ttft_ms else 0.0
        same = "same as plain" if r.same_outputs else "<b>differ</b>"
        rows.append(f"<tr data-config='{esc(r.label)}'><td>{esc(r.label)}</td><td>{_mean(r.ttft_ms):.0f}</td>"
                    f"<td>{p50:.0f}</td><td>{_mean(r.tpot_ms):.1f}</td><td>{r.hit_rate:.0%}</td>"
                    f"<td>{r.blocks_shared}</td><td>{r.prompt_tokens_computed}</td><td>{r.steps}</td>"
                    f"<td>{r.wall_s:.2f}</td><td>{r.wall_s / base:.2f}x</td><td>{same}</td></tr>")
    # scrolls sideways on a narrow screen instead of widening the page
    return (f"<div style='overflow-x:auto'><table id='serving-prefix-table-rows' class='ii-table'>{head}"
            f"{''.join(rows)}</table></div>")


def ttft_tpot_figure(runs: list[ConfigRun]) -> go.Figure:
    """Mean TTFT and mean TPOT (ms) per configuration, grouped bars."""
    labels = [r.label for r in runs]
    return figure([{"type": "bar", "name": "TTFT mean (ms)", "x": labels, "y": [_mean(r.ttft_ms) for r in runs],
                    "marker": {"color": PROMPT}},
                   {"type": "bar", "name": "TPOT mean (ms)", "x": labels, "y": [_mean(r.tpot_ms) for r in runs],
                    "marker": {"color": GENERATED}}],
                  "Time to first token and time per output token, per configuration", height=300,
                  barmode="group", yaxis={"title": {"text": "ms (this machine)"}},
                  xaxis={"title": {"text": "configuration (prefix caching, chunked prefill)"}},
                  legend={"orientation": "h", "y": -0.25})
