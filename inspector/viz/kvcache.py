"""KV cache view: per-layer K/V entries and bytes, the size formula with this model's numbers, growth.

Everything is read from `ForwardRecord.kv` (one `KVLayerStat` per layer after each forward); bytes per
element are derived from the recorded bytes and shapes, so the formula is checked against what the cache
measured. The bytes shown are those of the entries in use (`KVCache.nbytes`); the storage allocated for them
is larger, grown in chunks of positions (`capacity`), and the summary names both. This cache stores every
position in every layer: a sliding-window layer masks the keys older than its window, and an eviction policy
masks what it evicts, without freeing storage (the per-layer bars say so).
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.session.records import ForwardRecord, KVLayerStat
from inspector.units import format_bytes
from inspector.viz.common import GENERATED, KV_K, KV_V, PROMPT, esc, figure, vline, wrap_title

CAPTION = ("KV cache: every layer keeps the keys (K) and values (V) of all past positions, so a decode step "
           "computes K and V for the new token only. The prefill fills one entry per prompt token at once; each "
           "decode step adds one entry per layer. Bytes are those of the entries in use; the storage behind them "
           "is allocated in chunks of positions (the capacity in the summary and the bars' hover).")


def bytes_per_elem(stat: KVLayerStat) -> float:
    """Bytes per stored number: nbytes / (K and V elements of the used entries)."""
    b, h, _, d = stat.k_shape
    elems = 2 * b * h * stat.length * d
    return stat.nbytes / elems if elems else 0.0


def formula(kv: list[KVLayerStat]) -> dict:
    """The cache size 2 × layers × KV heads × head_dim × bytes/elem × tokens, with its parts; the bytes per
    token are the cache's own (`position_bytes`, its `kv_bytes`), or the measured bytes per entry in a
    trace file written before it was recorded."""
    s = kv[0]
    parts = {"layers": len(kv), "kv_heads": s.k_shape[1], "head_dim": s.k_shape[3],
             "bytes_per_elem": bytes_per_elem(s), "tokens": s.length}
    parts["measured"] = sum(x.nbytes for x in kv)
    parts["per_token"] = s.position_bytes or (round(parts["measured"] / s.length) if s.length else 0)
    parts["total"] = parts["per_token"] * parts["tokens"]
    return parts


def layer_bars(kv: list[KVLayerStat]) -> go.Figure:
    """Per layer: K bytes and V bytes (stacked), entries in the hover."""
    layers = [s.layer for s in kv]
    half = [s.nbytes / 2 for s in kv]  # K and V have the same shape
    hover = [f"layer {s.layer}<br>{s.length} entries (capacity {s.capacity})<br>K {tuple(s.k_shape)}"
             f"<br>V {tuple(s.v_shape)}" for s in kv]
    traces = [dict(type="bar", x=layers, y=half, name=f"{kind} bytes", marker={"color": color}, hovertext=hover,
                   hoverinfo="text+y") for kind, color in (("K", KV_K), ("V", KV_V))]
    n = kv[0].length if kv else 0
    notes = []
    if kv and len({s.nbytes for s in kv}) == 1:  # the usual case: say why the bars are all alike
        s = kv[0]
        why = (f"Every bar is the same: each layer stores K and V for the same {n} positions, "
               f"{s.k_shape[1]} KV heads × {s.k_shape[3]} numbers each. This cache stores every position in every "
               "layer: a sliding-window layer masks keys older than its window and an eviction policy masks what "
               "it evicts, neither frees storage.")
        notes.append({"text": wrap_title(why, 60), "x": 0, "xref": "paper", "xanchor": "left", "y": 1.0,
                      "yref": "paper", "yanchor": "bottom", "showarrow": False, "align": "left",
                      "font": {"size": 10, "color": "#4b5563"}})
    return figure(traces, f"KV cache per layer: {n} entries each, K and V", 300 + 40 * bool(notes), barmode="stack",
                  legend={"orientation": "h", "y": -0.25}, xaxis={"title": {"text": "layer"}},
                  yaxis={"title": {"text": "in use (bytes)"}}, annotations=notes, margin={"t": 40 + 48 * bool(notes)})


def growth_chart(records: list[ForwardRecord], weight_bytes: int | None = None) -> go.Figure:
    """Total cache bytes after each forward (step 0 = prefill), the prefill/decode boundary marked."""
    steps = [r.step for r in records]
    total = [sum(s.nbytes for s in r.kv) for r in records]
    colors = [PROMPT if r.kind == "prefill" else GENERATED for r in records]
    line = dict(type="scatter", x=steps, y=total, mode="lines+markers", marker={"color": colors, "size": 7},
                line={"color": "#9ca3af"}, name="KV cache bytes in use",
                hovertemplate="step %{x}<br>%{y:,} bytes in use<extra></extra>")
    notes = [{"x": 0, "y": total[0] if total else 0, "text": "prefill", "showarrow": True, "ax": 30, "ay": -30}]
    if len(steps) > 1:
        notes.append({"x": steps[-1], "y": total[-1], "text": "decode", "showarrow": True, "ax": -30, "ay": -30})
    title = "KV cache size over steps"
    if weight_bytes and total:
        title += f" (weights: {format_bytes(weight_bytes)}; the cache in use is {total[-1] / weight_bytes:.3%} of them)"
    return figure([line], title, 300, shapes=[vline(0.5, "#6b7280", 1, "dash")], annotations=notes,
                  xaxis={"title": {"text": "step (0 = prefill, then one per decode step)"},
                         "dtick": max(1, len(steps) // 20)},
                  yaxis={"title": {"text": "in use (bytes)"}, "rangemode": "tozero"})


def allocated_bytes(kv: list[KVLayerStat]) -> int:
    """Bytes of the storage allocated for K and V: each layer's capacity × its bytes per entry."""
    return sum(round(s.capacity * s.nbytes / s.length) for s in kv if s.length)


def summary_html(kv: list[KVLayerStat], weight_bytes: int, dtype_name: str = "") -> str:
    """Entries, bytes in use and allocated, cache vs weights, and the formula filled in with this model's numbers."""
    f = formula(kv)
    bpe = f["bytes_per_elem"]
    bpe_txt = f"{bpe:g}"
    ratio = f["measured"] / weight_bytes if weight_bytes else 0.0
    alloc = allocated_bytes(kv)
    return (
        f'<div id="kv-summary" class="ii-kv" data-entries="{f["tokens"]}" data-bytes="{f["measured"]}" '
        f'data-allocated="{alloc}">'
        f'<div><b id="kv-entries">Entries per layer: {f["tokens"]}</b> · {f["layers"]} layers × (K + V) · '
        f'K/V shape (batch, KV heads, positions, head_dim) = {esc(tuple(kv[0].k_shape))}</div>'
        f'<div class="ii-formula">2 (K and V) × {f["layers"]} layers × {f["kv_heads"]} KV heads × '
        f'{f["head_dim"]} head_dim × {bpe_txt} bytes/elem{esc(" (" + dtype_name + ")" if dtype_name else "")} × '
        f'{f["tokens"]} tokens = <b>{f["total"]:,} bytes</b> ({format_bytes(f["total"])}); '
        f'{f["per_token"]:,} bytes per token</div>'
        f'<div>Cache in use {format_bytes(f["measured"])} vs weights {format_bytes(weight_bytes)}: the cache is '
        f'{ratio:.3%} of the weights now. Allocated: room for {kv[0].capacity:,} positions per layer, '
        f'{format_bytes(alloc)}.</div></div>'
    )


def recompute_html(cached_ms: float, uncached_ms: float | None, n_tokens: int, n_new: int = 1) -> str:
    """The newest step with and without the cache: the cost the cache saves. `cached_ms` is its forward as the
    page ran it (recorder on), `uncached_ms` the recompute of all `n_tokens` positions timed afterwards (no
    recorder); `n_new` is how many positions the step itself added (the prefill: all of them)."""
    if uncached_ms is None:
        return ('<div id="kv-recompute" class="ii-muted">Press "Time this step without the cache" to re-run '
                'this step over the whole sequence without the KV cache.</div>')
    ratio = uncached_ms / cached_ms if cached_ms else float("nan")
    if n_new >= n_tokens:  # the prefill: it computes every position with or without a cache
        return (f'<div id="kv-recompute" class="ii-kv">This step is the prefill: it computes all {n_tokens} '
                f'tokens with or without a cache, so <b>{cached_ms:.1f} ms</b> (recorder on) and '
                f'<b>{uncached_ms:.1f} ms</b> (timed again, no recorder) differ by noise, recording and threads only. '
                'Step once to see what the cache saves.</div>')
    than = (f"{ratio:.1f}× slower" if ratio >= 1 else
            f"{1 / ratio:.1f}× faster: at a short context, the recorder and the threads each ran on weigh more")
    return (f'<div id="kv-recompute" class="ii-kv">This step with the cache: <b>{cached_ms:.1f} ms</b> '
            f'({n_new} new token{"s" if n_new != 1 else ""}, recorder on). Without it (recompute all {n_tokens} '
            f'tokens, timed now with no recorder): <b>{uncached_ms:.1f} ms</b> — {than}; the recompute grows '
            'with every token.</div>')
