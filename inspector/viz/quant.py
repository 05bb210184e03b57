"""Quantization views: weights memory and decode speed per precision, the per-step KL / top-1 strip, the
per-layer residual cosine, the fp32 and quantized next-token distributions side by side, and one weight
matrix's histogram before and after quantization.

Pure builders from `inspector.quant.measurements` (plain dataclasses) to plotly figures and HTML.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.quant.measurements import FidelityRecord, SchemeStats, WeightHistogram
from inspector.units import MIB, format_bytes
from inspector.viz.common import CHOSEN, GENERATED, PROMPT, esc, figure, show_piece

CAPTION = ("Quantization: the same model with its weights held in fewer bits. The fp32 model continues the "
           "prompt greedily; the quantized model is fed the same tokens (teacher-forced), so every step "
           "compares the two next-token distributions on identical inputs: KL(p_fp32 ‖ p_quant), whether the top "
           "token agrees, and how far each layer's residual stream has turned (cosine). Norms stay fp32 (tiny, "
           "and they scale every feature); the residual stream stays fp32, and so does the KV cache unless int8 KV "
           "is chosen (where the int8 and int4 kernels or bf16 weights run, each matmul takes its input in bf16); "
           "the embedding (for a tied model also the LM head) is quantized like the other matrices. int8 here keeps "
           "one scale per matrix row (8 bits a weight and a little more), int4-gN a 16-bit scale and minimum per N "
           "weights (4 + 32/N bits: 5.0 at g32), where the Serving lab's memory calculator counts GGUF's Q8_0 and "
           "Q4_0 blocks (one fp16 scale per 32 weights: 8.5 and 4.5 bits).")
AGREE, DISAGREE = GENERATED, "#ef4444"


def memory_figure(stats: list[SchemeStats]) -> go.Figure:
    """Horizontal bars: weight bytes per precision, with the ratio to fp32 (the first entry)."""
    base = stats[0].weight_bytes if stats else 1
    labels = [s.label for s in stats]
    return figure([{"type": "bar", "orientation": "h", "y": labels, "x": [s.weight_bytes / MIB for s in stats],
                    "marker": {"color": [PROMPT if s.label == "fp32" else CHOSEN for s in stats]},
                    "text": [f"{format_bytes(s.weight_bytes)} ({s.weight_bytes / base:.2f}x)" for s in stats],
                    "textposition": "auto", "hovertemplate": "%{y}: %{x:.1f} MiB<extra></extra>"}],
                  "Weights in memory per precision", height=260, xaxis={"title": {"text": "weights (MiB)"}},
                  yaxis={"autorange": "reversed", "title": {"text": "precision"}})


def speed_figure(stats: list[SchemeStats]) -> go.Figure:
    """Bars: measured decode tokens/s per precision ('not measured' where none yet)."""
    done = [s for s in stats if s.decode_tok_s]
    base = next((s.decode_tok_s for s in done if s.label == "fp32"), None)
    text = [f"{s.decode_tok_s:.1f} tok/s" + (f" ({s.decode_tok_s / base:.2f}x)" if base else "") for s in done]
    return figure([{"type": "bar", "orientation": "h", "y": [s.label for s in done],
                    "x": [s.decode_tok_s for s in done], "text": text, "textposition": "auto",
                    "marker": {"color": [PROMPT if s.label == "fp32" else GENERATED for s in done]},
                    "hovertext": [s.path for s in done], "hovertemplate": "%{y}: %{hovertext}<extra></extra>"}],
                  "Decode speed, measured here (median of a few steps; KV as chosen)", height=260,
                  xaxis={"title": {"text": "decode speed (tokens / s)"}},
                  yaxis={"autorange": "reversed", "title": {"text": "precision"}})


def strip_figure(rec: FidelityRecord, selected: int | None = None) -> go.Figure:
    """Per step: KL bars, green where the top-1 token agrees and red where it does not; the selected step ringed."""
    xs = [s.step for s in rec.steps]
    colors = [AGREE if s.top1_agree else DISAGREE for s in rec.steps]
    traces = [{"type": "bar", "x": xs, "y": [s.kl for s in rec.steps], "marker": {"color": colors},
               "customdata": [show_piece(s.piece) for s in rec.steps],
               "hovertemplate": "step %{x} (fp32 token %{customdata}): KL %{y:.3g} nats<extra></extra>"}]
    shapes = []
    if selected is not None and 0 <= selected < len(xs):
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": selected - 0.5, "x1": selected + 0.5,
                       "y0": 0, "y1": 1, "line": {"color": CHOSEN, "width": 2}, "fillcolor": "rgba(0,0,0,0)"})
    div = rec.first_divergence_step
    title = (f"KL(p_fp32 ‖ p_{rec.label}) per step · top-1 agreement {rec.top1_agreement:.0%} · "
             + ("greedy never diverges" if div is None else f"greedy diverges at step {div}"))
    ticks = [show_piece(s.piece, 8) for s in rec.steps]
    return figure(traces, title, height=260, shapes=shapes, bargap=0.15,
                  xaxis={"tickvals": xs, "ticktext": ticks if len(xs) <= 40 else None, "title": {"text": "step (fp32 token)"}},
                  yaxis={"title": {"text": "KL (nats)"}})


def layer_cos_figure(rec: FidelityRecord) -> go.Figure:
    """Per layer: 1 - cosine of the fp32 and quantized residual streams (min over steps, and mean), log scale."""
    xs = [x.layer for x in rec.layers]
    lo = [max(1 - x.resid_cos_min, 1e-9) for x in rec.layers]
    mean = [max(1 - x.resid_cos_mean, 1e-9) for x in rec.layers]
    traces = [{"type": "scatter", "mode": "lines+markers", "x": xs, "y": lo, "name": "worst step",
               "line": {"color": CHOSEN}, "customdata": [x.resid_cos_min for x in rec.layers],
               "hovertemplate": "layer %{x}: cosine %{customdata:.6f}<extra>worst step</extra>"},
              {"type": "scatter", "mode": "lines", "x": xs, "y": mean, "name": "mean", "line": {"color": PROMPT}}]
    return figure(traces, "Residual stream after each layer: 1 − cos(fp32, quantized)", height=260,
                  xaxis={"title": {"text": "layer"}}, yaxis={"type": "log", "title": {"text": "1 − cosine"}},
                  legend={"orientation": "h", "y": -0.3})


def dists_figure(rec: FidelityRecord, step: int) -> go.Figure:
    """The step's next-token probabilities, fp32 and quantized side by side, over both models' top tokens."""
    s = rec.steps[step]
    ids = list(dict.fromkeys(s.fp32_top.ids + s.quant_top.ids))
    p32 = dict(zip(s.fp32_top.ids, s.fp32_top.probs))
    pq = dict(zip(s.quant_top.ids, s.quant_top.probs))
    pieces = {**dict(zip(s.quant_top.ids, s.quant_top.pieces)), **dict(zip(s.fp32_top.ids, s.fp32_top.pieces))}
    ids.sort(key=lambda i: -max(p32.get(i, 0.0), pq.get(i, 0.0)))
    labels = [f"{show_piece(pieces[i])} [{i}]" for i in ids]
    # a token outside one model's top 10 has a probability below that list's last entry: shown as 0 here
    traces = [{"type": "bar", "name": "fp32", "x": labels, "y": [p32.get(i, 0.0) for i in ids], "marker": {"color": PROMPT}},
              {"type": "bar", "name": rec.label, "x": labels, "y": [pq.get(i, 0.0) for i in ids], "marker": {"color": CHOSEN}}]
    return figure(traces, f"Step {step}: next-token distribution, fp32 vs {rec.label} (KL {s.kl:.3g} nats)",
                  height=300, barmode="group", yaxis={"title": {"text": "probability"}},
                  xaxis={"title": {"text": "next token (piece [id]), most likely first; a missing bar: outside "
                                           "that model's top 10"}},
                  legend={"orientation": "h", "y": 1.12})


def histogram_figure(h: WeightHistogram) -> go.Figure:
    """Counts of the matrix's values before (fp32) and after quantization, on the same bins, log counts."""
    centers = [(a + b) / 2 for a, b in zip(h.edges[:-1], h.edges[1:])]
    traces = [{"type": "bar", "name": "fp32", "x": centers, "y": h.before, "marker": {"color": PROMPT}, "opacity": 0.6},
              {"type": "bar", "name": h.label, "x": centers, "y": h.after, "marker": {"color": CHOSEN}, "opacity": 0.6}]
    title = (f"{h.name}: {h.label} error max {h.max_abs_err:.3g}, RMS {h.rms_err:.3g} "
             f"({h.rms_err / h.rms_weight:.1%} of the weights' RMS)" if h.rms_weight else h.name)
    return figure(traces, title, height=280, barmode="overlay", bargap=0, yaxis={"type": "log", "title": {"text": "count"}},
                  xaxis={"title": {"text": "weight value"}}, legend={"orientation": "h", "y": 1.12})


def summary_html(rec: FidelityRecord | None, stats: SchemeStats | None = None) -> str:
    """The run's numbers in one line each (ids for tests)."""
    if rec is None:
        return '<div id="quant-summary" class="ii-caption">Press Run to compare a precision with fp32.</div>'
    div = "never" if rec.first_divergence_step is None else f"step {rec.first_divergence_step}"
    path = f"<div>compute: {esc(stats.path)}</div>" if stats else ""
    kv = (f"<div>KV cache {esc(stats.kv)}: {stats.kv_bytes_per_token:,} bytes per token</div>" if stats else "")
    return (f'<div id="quant-summary" data-scheme="{esc(rec.scheme)}" data-kv="{esc(rec.kv)}" '
            f'data-positions="{rec.positions}">'
            f"<div><b>{esc(rec.label)}</b> weights {format_bytes(rec.weight_bytes)} = "
            f"{rec.weight_bytes / rec.fp32_weight_bytes:.2f}x of fp32's {format_bytes(rec.fp32_weight_bytes)}</div>{path}{kv}"
            f"<div>{rec.positions} steps teacher-forced after {rec.prompt_tokens} prompt tokens: KL mean "
            f'<span id="quant-kl-mean">{rec.kl_mean:.4g}</span> nats, max {rec.kl_max:.4g}; top-1 agreement '
            f'<span id="quant-top1">{rec.top1_agreement:.3f}</span>; greedy output diverges: '
            f'<span id="quant-divergence">{div}</span></div></div>')


def kv_html(fp32_bytes: int, int8_bytes: int) -> str:
    """KV bytes per token, fp32 next to int8."""
    return (f'<div id="quant-kv" class="ii-caption">KV cache per token: fp32 {fp32_bytes:,} bytes, int8 {int8_bytes:,} bytes '
            f"({int8_bytes / fp32_bytes:.2f}x: one int8 per number plus one fp32 scale per head and position)</div>")

