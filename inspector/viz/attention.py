"""Attention view: one head's pattern, the all-heads overview, and the KV-head groups.

The session computes attention weights on demand (`Session.attention_pattern/row/overview`); these
builders only draw them. The overview is ONE image of (layers·heads) rows × keys quantised to uint8
(`inspector.viz.heatimage`) — never one subplot per head, which would be megabytes and seconds to paint.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sequential

from inspector.viz import heatimage as hi

from inspector.viz.common import (BLUES, CHOSEN, GENERATED, MAX_TICKS, PROMPT, TITLE_OUTSIDE, esc, figure,
                                  position_ticks, show_piece, vline)

CAPTION = ("Attention: the weights (the softmax of the scores: each query's row adds up to 1) with which each "
           "query position reads itself and the positions before it. In the prefill every prompt token attends "
           "to itself and all before it (the causal triangle); in a decode step the one new token's query reads "
           "the whole KV cache, or on a sliding-window (local) layer only its window. Query heads in one group "
           "share a KV head (GQA). The weights are recomputed from the recorded queries and the cached keys, as "
           "the model computes them.")

# Above this many cached keys a decode row is drawn as filled step lines, not bars: plotly.js keeps one SVG
# path per bar, and 2,841 bars took 298 ms of the page's time to redraw on each Step (bench/page.py).
MAX_BARS = 512


def _labels(pieces: list[str], n: int, start: int = 0) -> list[str]:
    return [f"{p}:{show_piece(pieces[p], 8)}" if p < len(pieces) else str(p) for p in range(start, start + n)]


def layer_kind(window: int | None) -> str:
    """How a layer attends, for titles: a local (sliding-window) layer names its window."""
    return "global layer" if window is None else f"local layer, window {window:,}"


# Above this many positions on an axis the prefill pattern is drawn in square blocks of positions, each block
# showing the largest weight inside it: the plot area is about 300 px tall, so more rows than this cannot be
# told apart on screen, while one cell per (query, key) pair grows as the square of the prompt (at 2,840 tokens,
# 8 million cells: 52 MB of figure JSON sent, parsed and drawn whenever the Attention tab opened on a prefill).
MAX_PATTERN_SIDE = 300


def block_max(z: np.ndarray, block: int) -> np.ndarray:
    """(n_q, n_k) -> (ceil(n_q / block), ceil(n_k / block)): each block's largest value; NaN cells (never seen)
    ignored, a block of NaN only stays NaN."""
    n_q, n_k = z.shape
    rows, cols = -(-n_q // block), -(-n_k // block)
    padded = np.full((rows * block, cols * block), np.nan, dtype=np.float32)
    padded[:n_q, :n_k] = z
    blocks = padded.reshape(rows, block, cols, block)  # (query block, query in it, key block, key in it)
    return np.fmax.reduce(np.fmax.reduce(blocks, axis=3), axis=1)  # fmax: NaN only where every cell is NaN


def _block_axis(pieces: list[str], n: int, start: int, block: int) -> tuple[list[str], dict]:
    """A pooled position axis: one category per block ("600–608"), ticks naming each shown block's first token."""
    firsts = list(range(start, start + n, block))
    names = [f"{p}–{min(p + block, start + n) - 1}" for p in firsts]
    stride = max(1, -(-len(firsts) // MAX_TICKS))
    shown = range(0, len(firsts), stride)
    labels = _labels(pieces, n, start)
    return names, {"tickmode": "array", "tickvals": [names[i] for i in shown],
                   "ticktext": [labels[firsts[i] - start] for i in shown], "type": "category"}


def pattern_heatmap(pattern: np.ndarray, pieces: list[str], start_pos: int, layer: int, head: int,
                    kv_head: int, window: int | None = None) -> go.Figure:
    """Prefill pattern (n_queries, n_keys); future (masked) cells left blank to show causality, and on a
    local layer (`window`: a sliding-window layer's) the keys too old for a query blank as well. A pattern with
    more than `MAX_PATTERN_SIDE` positions on an axis is drawn in blocks of positions (`block_max`), the title
    and hover saying so."""
    n_q, n_k = pattern.shape
    z = pattern.astype(np.float32).copy()
    q_pos = np.arange(start_pos, start_pos + n_q)[:, None]
    z[np.arange(n_k)[None, :] > q_pos] = np.nan  # causal mask: query i never sees key j > i
    if window is not None:
        z[np.arange(n_k)[None, :] <= q_pos - window] = np.nan  # outside the window: never seen
    title = f"Layer {layer} head {head} (KV head {kv_head}): {n_q} queries × {n_k} keys, causal"
    if window is not None:
        title += f"; {layer_kind(window)}"
    block = -(-max(n_q, n_k) // MAX_PATTERN_SIDE)
    if block > 1:
        x, xticks = _block_axis(pieces, n_k, 0, block)
        y, yticks = _block_axis(pieces, n_q, start_pos, block)
        z = block_max(z, block)
        hover = "queries %{y} → keys %{x}<br>largest weight in the block %{z:.3f}<extra></extra>"
        title += f"; drawn in blocks of {block}×{block} positions, each its largest weight"
    else:
        x, y = list(range(n_k)), list(range(start_pos, start_pos + n_q))
        xticks = position_ticks(_labels(pieces, n_k))
        yticks = position_ticks(_labels(pieces, n_q, start_pos), start_pos)
        hover = "query %{y} → key %{x}<br>weight %{z:.3f}<extra></extra>"
    heat = dict(type="heatmap", z=z, x=x, y=y, colorscale=BLUES, zmin=0.0, zmax=1.0,
                colorbar={"title": {"text": "weight"}, "thickness": 12}, hovertemplate=hover)
    return figure([heat], title, 420,
                  xaxis={"title": {"text": "key position (attended to)"}, **xticks, "tickangle": -60},
                  yaxis={"title": {"text": "query position"}, "autorange": "reversed", **yticks})


def row_bars(row: np.ndarray, pieces: list[str], n_prompt: int, query_pos: int, layer: int, head: int,
             kv_head: int, window: int | None = None) -> go.Figure:
    """Decode: the new token's attention over all cached positions, prompt vs generated colored; on a local
    layer a dashed line marks where its window starts (keys left of it get weight 0)."""
    n_k = row.shape[0]
    labels = _labels(pieces, n_k)
    top = int(np.argmax(row)) if n_k else 0
    hover = "key %{customdata}<br>weight %{y:.3f}<extra></extra>"
    if n_k > MAX_BARS:
        traces = filled_steps(row, labels, n_prompt, top, hover)
    else:
        colors = [PROMPT if k < n_prompt else GENERATED for k in range(n_k)]
        colors[top] = CHOSEN
        traces = [dict(type="bar", x=list(range(n_k)), y=row.astype(np.float32), marker={"color": colors},
                       customdata=labels, hovertemplate=hover)]
    title = f"Layer {layer} head {head} (KV head {kv_head}): query at position {query_pos} over {n_k} cached keys"
    shapes = []
    if window is not None:
        title += f"; {layer_kind(window)}"
        if query_pos - window + 1 > 0:
            shapes.append(vline(query_pos - window + 0.5, CHOSEN, 2, "dash"))
    keys_axis = {"title": {"text": "key position in the KV cache"}, "tickangle": -60,
                 **position_ticks(labels, whole_strides=True)}  # the range moves once per tick stride, not per Step
    return figure(traces, title, 360, shapes=shapes, meta=TITLE_OUTSIDE, xaxis=keys_axis,
                  yaxis={"title": {"text": "attention weight"},
                         "range": [0, max(1e-6, float(row.max(initial=0))) * 1.1]})


def filled_steps(row: np.ndarray, labels: list[str], n_prompt: int, top: int, hover: str) -> list[dict]:
    """The same weights as bars, drawn as filled step lines (one SVG path per trace, not one per key): the
    prompt's keys and the generated keys in their colors, the most-attended key as an orange line on top.
    Hover names each key and its weight as a bar's does."""
    def part(lo: int, hi_: int, color: str) -> dict:
        return dict(type="scatter", x=np.arange(lo, hi_, dtype=np.int32), y=row[lo:hi_].astype(np.float32),
                    customdata=labels[lo:hi_], mode="lines", line={"shape": "hvh", "width": 1, "color": color},
                    fill="tozeroy", fillcolor=color, hovertemplate=hover, showlegend=False)
    n_k = row.shape[0]
    traces = [part(lo, hi_, color) for lo, hi_, color in ((0, min(n_prompt, n_k), PROMPT), (n_prompt, n_k, GENERATED))
              if hi_ > lo]
    # the top key: an orange line from 0 to its weight, drawn after (over) the filled steps
    traces.append(dict(type="scatter", x=[top, top], y=[0.0, float(row[top])], customdata=[labels[top]] * 2,
                       mode="lines", line={"color": CHOSEN, "width": 3}, hovertemplate=hover, showlegend=False))
    return traces


BLUES_LUT = hi.colormap(sequential.Blues)  # light = 0, dark = 255


def overview_html(rows: np.ndarray, pieces: list[str], n_rep: int, query_pos: int,
                  layer: int | None = None, head: int | None = None, local: list[bool] | None = None) -> str:
    """All heads at once: rows (num_layers, num_heads, n_keys) -> ONE image of (L·H) rows × keys, the
    colors quantised to uint8 and the weights themselves (0 to 1) in hover; hover names the layer, query head and the KV head it reads, and with
    `local` (per layer: a sliding-window layer) whether the layer is local or global."""
    n_layers, n_heads, n_k = rows.shape
    z = np.clip(np.round(rows.reshape(n_layers * n_heads, n_k) * 255), 0, 255).astype(np.uint8)  # (L*H, n_k)
    keys = _labels(pieces, n_k)
    marks = [hi.row_mark(layer * n_heads + head, n_layers * n_heads)] if layer is not None and head is not None else []
    every = max(1, -(-n_layers // 10))  # at most ~10 layer labels
    stride = max(1, -(-n_k // 12))
    return hi.heat_html(hi.HeatImage(
        elem_id="attn-overview-map",
        title=f"All {n_layers}×{n_heads} heads: query at position {query_pos}, one row per head",
        codes=z, lut=BLUES_LUT, values=rows.reshape(n_layers * n_heads, n_k), what="attention weight", digits=3,
        row_names=[f"L{l}·H{h}·kv{h // n_rep}" + ("" if local is None else " local" if local[l] else " global")
                   for l in range(n_layers) for h in range(n_heads)],
        col_names=[f"key {k}" for k in keys],
        y_ticks=[(l * n_heads, f"L{l}" + ("" if local is None else "ᴸ" if local[l] else "ᴳ"))
                 for l in range(0, n_layers, every)],
        x_ticks=[(k, keys[k]) for k in range(0, n_k, stride)],
        scale=("1", "0", "attention weight"), height=max(240, min(800, n_layers * n_heads * 3)),
        row_band=n_heads, marks=marks, x_title="key position", y_title="layer · head"))


def kv_groups_html(num_heads: int, num_kv_heads: int, groups: list[list[int]] | None = None,
                   head: int | None = None) -> str:
    """Which query heads share which KV head (grouped-query attention), the picked head outlined."""
    if groups is None:
        rep = num_heads // num_kv_heads
        groups = [list(range(j * rep, (j + 1) * rep)) for j in range(num_kv_heads)]
    parts = []
    for j, qs in enumerate(groups):
        heads = "".join(f'<span class="ii-qhead{" ii-selected" if q == head else ""}">q{q}</span>' for q in qs)
        parts.append(f'<div class="ii-group"><span class="ii-kvhead">KV head {j}</span>{heads}</div>')
    share = num_heads // max(1, num_kv_heads)
    note = (f"{num_heads} query heads read {num_kv_heads} KV heads: each K/V is shared by {share} query heads, so the "
            f"cache is {share}× smaller than with one KV head per query head." if share > 1 else
            f"{num_heads} query heads, each with its own KV head (multi-head attention: no sharing).")
    return f'<div id="kv-groups" class="ii-groups"><div class="ii-caption">{esc(note)}</div>{"".join(parts)}</div>'
