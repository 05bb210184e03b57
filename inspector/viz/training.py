"""Training view: a known text teacher-forced (per-token loss coloured on the tokens, mean loss, perplexity),
one backward pass (gradient norm per layer, and per layer and weight type), and memory of inference beside
one training step, each part labelled measured or formula.

Pure builders from `inspector.analysis.findings.TrainingStep` to HTML and plotly figures; no torch, no gradio.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from inspector.analysis.findings import MemoryPart, TrainingStep
from inspector.units import format_bytes
from inspector.viz.common import ATTN, BLUES, MLP, PROMPT, esc, figure, show_piece

CAPTION = ("Training runs the same forward pass as inference, but over a whole text whose every next token is "
           "known: it scores each prediction (the loss: how surprised the model was, -log p of the true next "
           "token), then sends gradients back through every weight to say how each should change. Inference "
           "runs forward only, one new token at a time, and keeps a KV cache instead. Nothing here changes a "
           "weight: this is one step's forward and backward, measured. When the box holds the current run's text, "
           "its generated tokens are ones the model chose itself (greedy: its top-1 at every step), so they score "
           "a low loss by construction; paste a text the model did not write to see what surprises it.")
LOSS_SCALE = 10.0  # nats at which a token's colour is full red (a probability of e^-10 for the true token)
SHORT_NAMES = {"self_attn.q_proj.weight": "q", "self_attn.k_proj.weight": "k", "self_attn.v_proj.weight": "v",
               "self_attn.o_proj.weight": "o", "mlp.gate_proj.weight": "gate", "mlp.up_proj.weight": "up",
               "mlp.down_proj.weight": "down", "input_layernorm.weight": "norm 1",
               "post_attention_layernorm.weight": "norm 2"}


def loss_color(loss: float) -> str:
    """White (0 nats) to red (LOSS_SCALE nats and beyond)."""
    f = min(max(loss / LOSS_SCALE, 0.0), 1.0)
    g = round(255 - 175 * f)  # 255 -> 80
    return f"rgb(255,{g},{g})"


def summary_html(step: TrainingStep) -> str:
    """Mean loss, perplexity, the token counts and the two passes' times."""
    lo = step.losses
    return (f'<div class="ii-caption" id="training-summary-text">{len(lo.token_ids)} tokens, '
            f"{len(lo.losses)} predictions: mean loss <b>{lo.mean_loss:.3f}</b> nats per token, "
            f'perplexity <b id="training-perplexity">{lo.perplexity:.2f}</b> (exp of the mean loss: on average '
            f"as unsure as a uniform choice among that many tokens). Forward with autograd {step.seconds_forward * 1e3:.0f} ms, backward "
            f"{step.seconds_backward * 1e3:.0f} ms.</div>")


def tokens_html(step: TrainingStep) -> str:
    """Each token on a background from white (predicted well) to red (a surprise); the first token has no
    prediction (grey). The hover gives the loss and the probability the model gave the token."""
    lo = step.losses
    chips = [f'<span class="ii-loss-tok" title="first token: nothing before it to predict from" '
             f'style="background:#e5e7eb;border-radius:4px;padding:1px 3px;white-space:pre">'
             f"{esc(show_piece(lo.pieces[0], 24))}</span>"] if lo.pieces else []
    for piece, loss in zip(lo.pieces[1:], lo.losses):
        chips.append(f'<span class="ii-loss-tok" data-loss="{loss:.4f}" title="loss {loss:.3f} nats, p = '
                     f'{math.exp(-loss):.3g}" style="background:{loss_color(loss)};border-radius:4px;'
                     f'padding:1px 3px;white-space:pre">{esc(show_piece(piece, 24))}</span>')
    legend = (f'<div class="ii-caption">colour: loss of predicting the token from the ones before it, white 0 '
              f'to red {LOSS_SCALE:.0f}+ nats</div>')
    return (f'<div id="training-tokens-chips" style="display:flex;flex-wrap:wrap;gap:2px;max-height:220px;'
            f'overflow-y:auto">{"".join(chips)}</div>{legend}')


def layer_norms_figure(step: TrainingStep) -> go.Figure:
    """The gradient's L2 norm per layer (all the layer's weights together): how hard one step would push
    each layer's weights. Titles stay short: plotly does not wrap them on a phone."""
    n = len(step.layer_norms)
    return figure([{"type": "bar", "x": list(range(n)), "y": step.layer_norms, "marker": {"color": PROMPT},
                    "name": "gradient norm", "hovertemplate": "layer %{x}: %{y:.4g}<extra></extra>"}],
                  "Gradient norm per layer", height=300,
                  xaxis={"title": {"text": "layer"}, "dtick": 1 if n <= 12 else None},
                  yaxis={"title": {"text": "‖∂loss/∂W‖ (L2, loss in nats)"}})


def weight_norms_figure(step: TrainingStep) -> go.Figure:
    """Layers x weight types: each weight matrix's (or norm vector's) gradient L2 norm."""
    types = step.weight_types()
    n = len(step.layer_norms)
    z = [[None] * len(types) for _ in range(n)]
    for name, v in step.grad_norms.items():
        parts = name.split(".")
        if "layers" in parts:
            i = parts.index("layers")
            z[int(parts[i + 1])][types.index(".".join(parts[i + 2:]))] = v
    labels = [SHORT_NAMES.get(t, t.removesuffix(".weight")) for t in types]
    return figure([{"type": "heatmap", "z": z, "x": labels, "y": list(range(n)), "colorscale": BLUES,
                    "colorbar": {"title": {"text": "‖∂loss/∂W‖"}},
                    "hovertemplate": "layer %{y}, %{x}: %{z:.4g}<extra></extra>"}],
                  "Gradient norm per weight", height=max(300, 14 * n + 120),
                  xaxis={"title": {"text": "weight (attention q k v o, MLP gate up down, norms)"}},
                  yaxis={"title": {"text": "layer"}, "autorange": "reversed"})


def outside_layers_html(step: TrainingStep) -> str:
    """The weights outside the blocks (embedding, final norm, LM head): their gradient norms."""
    rows = [(name, v) for name, v in step.grad_norms.items() if ".layers." not in f".{name}."]
    cells = "".join(f"<tr><td>{esc(name)}</td><td>{v:.4g}</td></tr>" for name, v in rows)
    return ('<table class="ii-table" id="training-outside"><thead><tr><th>weight outside the layers</th>'
            f"<th>gradient norm</th></tr></thead><tbody>{cells}</tbody></table>")


def _side(parts: list[MemoryPart], title: str) -> tuple[str, int]:
    total = sum(m.bytes for m in parts)
    rows = "".join(f'<tr><td>{esc(m.label)}</td><td>{esc(format_bytes(m.bytes))}</td>'
                   f'<td><span class="ii-memory-how" data-how="{esc(m.how)}">{esc(m.how)}</span></td>'
                   f"<td>{esc(m.note)}</td></tr>" for m in parts)
    return (f'<thead><tr><th colspan="4">{esc(title)}</th></tr></thead><tbody>{rows}'
            f'<tr class="ii-total"><td>total</td><td>{esc(format_bytes(total))}</td><td></td><td></td></tr></tbody>'), total


def memory_html(step: TrainingStep) -> str:
    """Inference and one training step side by side, each part's bytes and how it was obtained."""
    inf, inf_total = _side(step.inference_memory, "inference (forward only)")
    train, train_total = _side(step.training_memory, "one training step (Adam)")
    ratio = train_total / inf_total if inf_total else float("nan")
    return (f'<div id="training-memory" style="overflow-x:auto">'
            f'<div style="display:flex;flex-wrap:wrap;gap:12px">'
            f'<table class="ii-table" style="flex:1;min-width:280px;width:auto">{inf}</table>'
            f'<table class="ii-table" style="flex:1;min-width:280px;width:auto">{train}</table></div>'
            f'<div class="ii-caption">Summed, a training step\'s parts come to {ratio:.1f}x inference\'s on this '
            f"text: a sum, not a measured peak (the backward frees activations as it fills the gradients, and "
            f"neither side counts transient buffers). Measured: counted from the tensors (activations: what "
            f"autograd keeps for the backward, each storage once). Formula: Adam keeps two fp32 moments per "
            f"parameter.</div></div>")


def memory_figure(step: TrainingStep) -> go.Figure:
    """The same parts as stacked bars, inference beside the training step."""
    colors = {"weights": PROMPT, "KV cache": ATTN, "activations kept for backward": MLP, "gradients": "#ef4444",
              "Adam moments": "#6b7280"}
    labels = list(dict.fromkeys(m.label for m in step.inference_memory + step.training_memory))
    traces = []
    for label in labels:
        ys = [next((m.bytes / 2**20 for m in side if m.label == label), 0.0)
              for side in (step.inference_memory, step.training_memory)]
        how = next(m.how for m in step.inference_memory + step.training_memory if m.label == label)
        traces.append({"type": "bar", "name": f"{label} ({how})", "x": ["inference", "training step"], "y": ys,
                       "marker": {"color": colors.get(label, "#9ca3af")},
                       "hovertemplate": "%{x}: %{y:.1f} MiB<extra>" + esc(label) + "</extra>"})
    return figure(traces, "Memory: inference vs one training step", height=320, barmode="stack",
                  xaxis={"title": {"text": "what runs"}}, yaxis={"title": {"text": "memory (MiB)"}},
                  legend={"orientation": "h", "y": -0.3})
