"""KV-cache policy views: KL against the full cache over the bytes each policy kept; for one generation
under a policy, the positions x steps map of what one layer and KV head keeps (and why) and what it evicted
(grey), the per-step KL and top-1 against the full cache on the same tokens, and the bytes a compacting
cache would save (the caches here mask evicted entries and keep their storage; the KIVI caches hold
dequantized fp32 numbers and count the bytes of packed codes); for one
head of a prefill, the step-through of tiled attention (the tile read, m and l per query row, how far each
row's output moved when the tile was folded in) with the HBM bytes by formula beside the measured times.

Pure builders from plain records (the dicts `inspector kv-eval --json` prints; `KVPolicyRun` of
`inspector.quant.measurements`) to plotly figures and HTML; no torch, no gradio.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.quant.measurements import KEPT_CODES, FlashWalk, KVPolicyRun
from inspector.units import MIB, format_bytes
from inspector.viz.common import ATTN, BLUES, CHOSEN, GENERATED, MLP, PROMPT, REMOVED, esc, figure, show_piece

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
    return figure(traces, "KL against the full cache over the KV bytes kept (as a compacting or packed cache would "
                          "hold them)", height=380,
                  xaxis={"title": {"text": "KV cache kept (MiB)"}},
                  yaxis={"title": {"text": "mean KL (nats per token)"}, "type": "log"},
                  shapes=[{"type": "line", "x0": full, "x1": full, "yref": "paper", "y0": 0, "y1": 1,
                           "line": {"dash": "dot", "color": "#6b7280"}}],
                  annotations=[{"x": full, "yref": "paper", "y": 1, "text": "full cache", "showarrow": False,
                                "xanchor": "right"}])


CAPTION = ("KV-cache policies: the model generates with a policy deciding, after every forward, which cached "
           "positions each layer and KV head keeps; a full cache is fed the same tokens beside it, so each step "
           "compares the two next-token distributions on the same context (KL and top-1). Evicted entries are "
           "masked and kept keys keep their original positions (the H2O convention), so the bytes saved are what "
           "a cache that frees evicted entries would save: here their storage stays allocated, and the KV cache "
           "view shows the whole cache. The int8 and int4 (KIVI) caches count the bytes of packed codes with "
           "their scales; their buffers hold the dequantized numbers in fp32.")
# What the kept map's hover score is (H2O's, the only policy that records one): each query's weights sum to 1,
# so a position's total over many queries and a KV head's group of query heads can exceed 1.
SCORE_NOTE = ("(H2O: the attention this position received, summed over every query so far and over the KV head's "
              "query heads, so it can exceed 1)")
# code -> color: not yet (white), recent, sink, heavy hitter, SnapKV vote, kept, evicted (grey)
CODE_COLORS = ["#ffffff", GENERATED, ATTN, CHOSEN, PROMPT, MLP, REMOVED]


def kept_map_figure(run: KVPolicyRun, layer: int, head: int) -> go.Figure:
    """Positions (rows) x forwards (columns) of one layer and KV head: kept (colored by why), evicted (grey)."""
    codes = run.kept[layer, head]  # (forwards, positions)
    scores = run.scores[layer, head]
    n = len(KEPT_CODES)
    scale = []
    for i, color in enumerate(CODE_COLORS):  # a discrete colorscale: one flat band per code
        scale += [[i / n, color], [(i + 1) / n, color]]
    hover = [[f"{show_piece(run.pieces[p]) if p < len(run.pieces) else ''} @ {p}, step {f}: {KEPT_CODES[int(c)]}"
              + (f", score {scores[f, p]:.3g} {SCORE_NOTE}" if scores[f, p] else "") for f, c in enumerate(codes[:, p])]
             for p in range(codes.shape[1])]
    trace = {"type": "heatmap", "z": codes.T.astype("uint8"), "zmin": 0, "zmax": n, "colorscale": scale,
             "showscale": False, "text": hover, "hoverinfo": "text", "xgap": 1, "ygap": 0,
             "showlegend": False}  # the legend is the one marker per code below
    legend = [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": KEPT_CODES[i],
               "marker": {"color": CODE_COLORS[i], "symbol": "square", "size": 10,
                          "line": {"color": "#9ca3af", "width": 1}}} for i in range(1, n)]
    return figure([trace, *legend], f"Layer {layer}, KV head {head}: kept and evicted positions per step ({run.label})",
                  height=420, xaxis={"title": {"text": "step (0 = prefill)"}},
                  yaxis={"title": {"text": "position"}, "autorange": "reversed"},
                  shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": run.prompt_len - 0.5,
                           "y1": run.prompt_len - 0.5, "line": {"color": "#111827", "dash": "dot", "width": 1}}],
                  legend={"orientation": "h", "y": -0.2})


def step_metrics_figure(run: KVPolicyRun) -> go.Figure:
    """Per generated token: KL(p_full || p_policy) as bars, colored by whether the top-1 tokens agree."""
    steps = run.steps
    return figure([{"type": "bar", "x": list(range(len(steps))), "y": [s.kl for s in steps],
                    "marker": {"color": [GENERATED if s.top1_agree else "#ef4444" for s in steps]},
                    "text": [f"{show_piece(s.piece)} (full: {show_piece(s.full_top1_piece)})" for s in steps],
                    "hovertemplate": "step %{x}: KL %{y:.4f}<br>%{text}<extra></extra>"}],
                  "KL against the full cache on the same context (red: the top-1 token differs)", height=260,
                  xaxis={"title": {"text": "generated token"}}, yaxis={"title": {"text": "KL (nats)"}})


def bytes_text(label: str, kept: int, full: int) -> str:
    """The bytes a policy kept against the full cache, said as what they are (see the module doc)."""
    saved = 1 - kept / full if full else 0.0
    of = f"{esc(format_bytes(kept))} of the full cache's {esc(format_bytes(full))}"
    kind = label.split(",", 1)[0]
    if kind == "full":
        return f"KV cache {esc(format_bytes(full))}"
    if kind in ("int8", "int4"):
        return (f"as packed {kind} codes with their scales the cache would hold {of} ({saved:.0%} saved; its "
                "buffers here hold the dequantized numbers in fp32)")
    return (f"the entries still attended take {of}: a cache that freed the evicted ones would save {saved:.0%} "
            "(this one masks them and keeps their storage)")


def summary_html(run: KVPolicyRun, elem_id: str = "kvpolicy-summary-text") -> str:
    """The texts side by side, mean KL, top-1 agreement and the bytes kept against the full cache."""
    last = run.steps[-1]
    return (f'<div class="ii-caption" id="{elem_id}">{esc(run.label)}: mean KL {run.kl_mean:.4f} nats, '
            f"top-1 agreement {run.top1_agreement:.0%} over {len(run.steps)} tokens; "
            f"{bytes_text(run.label, last.kept_bytes, last.full_bytes)}.</div>"
            f'<div class="ii-caption"><b>with the policy:</b> {esc(run.text)}</div>'
            f'<div class="ii-caption"><b>full cache:</b> {esc(run.full_text)}</div>')


def flash_tile_figure(walk: FlashWalk, i: int) -> go.Figure:
    """Tile i's weights exp(s - m) (queries x the tile's keys): what the kernel reads and folds in."""
    s0, s1 = walk.tiles[i]
    w = walk.weights[i].astype("float32")
    return figure([{"type": "heatmap", "z": w, "x": list(range(s0, s1)), "colorscale": BLUES, "zmin": 0, "zmax": 1,
                    "colorbar": {"title": {"text": "exp(s - m)"}},
                    "hovertemplate": "query %{y}, key %{x}: %{z:.3f}<extra></extra>"}],
                  f"Layer {walk.layer}, head {walk.head}: tile {i + 1} of {len(walk.tiles)} reads keys {s0}..{s1 - 1}",
                  height=340, xaxis={"title": {"text": "key position (this tile)"}},
                  yaxis={"title": {"text": "query position"}, "autorange": "reversed"})


def flash_state_figure(walk: FlashWalk, i: int) -> go.Figure:
    """After tile i, per query row: the running max m, the running sum l and the output's move."""
    rows = list(range(walk.m.shape[1]))
    trace = [{"type": "scatter", "x": rows, "y": walk.m[i].tolist(), "name": "m (running max)", "line": {"color": CHOSEN}},
             {"type": "scatter", "x": rows, "y": walk.l[i].tolist(), "name": "l (running sum)", "yaxis": "y2",
              "line": {"color": PROMPT}},
             {"type": "bar", "x": rows, "y": walk.out_change[i].tolist(), "name": "|output change| (rescaled)",
              "yaxis": "y2", "marker": {"color": GENERATED}, "opacity": 0.5}]
    return figure(trace, f"After tile {i + 1}: m and l per query row, and how far each row's output moved",
                  height=300, xaxis={"title": {"text": "query position"}}, yaxis={"title": {"text": "m"}},
                  yaxis2={"overlaying": "y", "side": "right", "title": {"text": "l, |change|"}},
                  legend={"orientation": "h", "y": -0.25})


def flash_html(walk: FlashWalk) -> str:
    """HBM traffic by formula (labelled so, FlashAttention-2's loop order) beside the prefill times measured on
    this machine, and why the tiled path is not faster on a CPU."""
    T = walk.m.shape[1]
    scores = T * T * 4  # one head's T x T fp32 score matrix on this CPU
    return (f'<div class="ii-caption" id="kvpolicy-flash-text">One head, {T} queries x {T} keys, tiles of '
            f"{walk.tiles[0][1] - walk.tiles[0][0]} keys. By formula (not measured), with fp16 numbers and no "
            f"causal block skipping, a GPU kernel that writes the T x S score matrix to HBM and reads it back moves "
            f"{esc(format_bytes(walk.hbm_standard))}; one that keeps it on chip, in FlashAttention-2's loop order "
            f"(Dao 2023: each block of 128 query rows read once, K and V read once per block, the output written "
            f"once), moves {esc(format_bytes(walk.hbm_tiled))} "
            f"({walk.hbm_standard / max(walk.hbm_tiled, 1):.1f}x less). "
            f"Measured on this machine, the whole model's prefill: standard {walk.ms_standard:.0f} ms, tiled "
            f"{walk.ms_tiled:.0f} ms. A CPU has a memory hierarchy for tiling to exploit too (main memory, then "
            f"caches), and fused CPU flash-attention kernels exist (PyTorch's scaled_dot_product_attention has "
            f"one), but the tiled path here is an unfused loop of PyTorch operations (per tile a product, a max, "
            f"exponentials, sums and a rescale, each its own pass over memory), and one head's score matrix at "
            f"this length is {esc(format_bytes(scores))} in fp32, against the 0.5 to 2 MiB of L2 cache a CPU "
            f"core usually has (and tens of MiB of shared L3).</div>")
