"""Direct logit attribution: one token's logit split into what each part of the model wrote.

The residual stream x at the last position after the last block is a sum: the token's embedding (times
sqrt(D) on Gemma, times `embedding_multiplier` on Granite, as the model adds it), each layer's attention
output and each layer's MLP output. The logit before any final soft-cap is unembed[t] . (g * x / rms(x)) / s,
g the final norm's gain (its weight w, or 1 + w on Gemma), s Granite's `logits_scaling` (1 elsewhere);
rms(x) = sqrt(mean(x^2) + eps) is one number for the whole sum, and freezing it at this position makes the
logit linear in x: with u = unembed[t] * g / rms(x) / s each part contributes u . part.

Attention's output is o_proj(z) = sum_h W_O[:, h*d:(h+1)*d] @ z_h + b_O, so head h writes W_O_h @ z_h
(a v bias, as Qwen2's, is inside z_h: the pattern sums to 1) and an o_proj bias is a part of its own.
Granite multiplies attention's and the MLP's outputs by `residual_multiplier` m before the residual adds them
(a constant of the model, not a frozen scale): each head and bias is read times m, and the MLP's part is what
the residual stream added, m included. A mixture of experts' MLP is one part, as a dense MLP is.
Gemma's sandwich block passes that output through a post-attention RMSNorm before the residual adds it:
its scale, rms of o_proj's output at this position, is frozen too, so each head's share goes through the
same linear map (s = g_post / rms(raw)) and the heads and bias sum to what attention added. The MLP's part
is what it added to the residual stream (after Gemma's post-feed-forward norm; one part, so no scale of
its own needs freezing). What the run's interventions added is accounted as well: an edit of the attention
output beyond its heads and bias (`attn_rest`) and of the residual stream itself, e.g. steering
(`other`). So the parts sum to the pre-cap logit under any lever, to fp32 rounding (they are computed in
fp64 from the recorded fp32 activations; a bf16 model's logit itself is rounded to bf16, so there the sum
is within that rounding). Gemma 2's final soft-cap, logit = cap * tanh(pre-cap / cap), is
not linear; the record keeps both logits (`Attribution.logit`, `Attribution.logit_precap`).
An intervention after the last residual (the final norm's output, the logits) would change the logit
outside this sum: `attribute` refuses it with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from inspector.analysis.findings import Attribution, LayerParts
from inspector.engine import steps
from inspector.engine.layers import RMSNorm
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.levers import Levers, check_interventions

AFTER_THE_RESIDUAL = ("ln_final.", "unembed.")  # points past the sum the parts explain


class _LastPosition:
    """Keeps the last position's embedding, every layer's z, attention output (before and after a post-norm)
    and MLP output, the final residual, and the logits before a final soft-cap."""

    def __init__(self, num_layers: int, post_norms: bool, softcap: bool) -> None:
        self.last = f"blocks.{num_layers - 1}.hook_resid_post"
        self.names = {"hook_embed", self.last} | ({"unembed.hook_logits_raw"} if softcap else set())
        for i in range(num_layers):
            self.names |= {f"blocks.{i}.attn.hook_z", f"blocks.{i}.hook_attn_out", f"blocks.{i}.hook_mlp_out"}
            if post_norms:
                self.names.add(f"blocks.{i}.hook_attn_out_raw")
        self.values: dict[str, torch.Tensor] = {}

    def wants(self, name: str) -> bool:
        return name in self.names

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name in self.names:
            self.values[name] = value[0, -1].detach().double()


def norm_map(norm: RMSNorm, x: torch.Tensor, gemma: bool) -> tuple[torch.Tensor, float]:
    """The norm at input x (D,) as a linear map with its scale frozen: (g / rms(x) (D,) fp64, rms(x)),
    g = 1 + w for Gemma's norms, w for the others."""
    rms = float(torch.sqrt(x.pow(2).mean() + norm.eps))
    gain = norm.weight.double() + 1.0 if gemma else norm.weight.double()
    return gain / rms, rms


@torch.inference_mode()
def attribute(model: Transformer, ids: Sequence[int], token: int | None = None, levers: Levers = loop.NO_LEVERS,
              piece: Callable[[int], str] = str) -> Attribution:
    """The logit of `token` (default: the top-1) as the next token after `ids`, split into its parts."""
    cfg = model.config
    if not ids:
        raise InputError("the prompt is empty: give it some text")
    check_interventions(levers.interventions, cfg)
    late = [iv.label or iv.point for iv in levers.interventions if iv.point.startswith(AFTER_THE_RESIDUAL)]
    if late:
        raise InputError(f"attribution splits the residual stream before the final norm; {', '.join(late)} "
                         "edits after it: drop that intervention to attribute")
    cap = cfg.final_logit_softcapping
    rec = _LastPosition(cfg.num_hidden_layers, cfg.gemma, cap is not None)
    logits = loop.forward(model, steps.new_cache(model), [list(ids)], Levers(interventions=levers.interventions), rec)[0]
    t = int(logits.argmax()) if token is None else int(token)
    if not 0 <= t < cfg.vocab_size:
        raise InputError(f"token id must be from 0 to {cfg.vocab_size - 1}, got {t}")
    v = rec.values
    x = v[rec.last]  # (D,) the residual stream entering the final norm
    scale, final_rms = norm_map(model.model.norm, x, cfg.gemma)
    # (D,) the token's unembedding read through the frozen norm (and Granite's division of the logits)
    u = model.unembed_weight[t].double() * scale / cfg.logits_scaling
    H, d = cfg.num_attention_heads, cfg.head_dim
    embed = float(v["hook_embed"] @ u)
    layers, post_rms, accounted = [], [], v["hook_embed"].clone()
    for i, block in enumerate(model.model.layers):
        u_attn = u * cfg.residual_multiplier  # Granite scales attention's output before the add; 1 elsewhere
        if cfg.gemma:  # o_proj's output passes the post-attention norm before the residual adds it
            post, rms = norm_map(block.post_attention_layernorm, v[f"blocks.{i}.hook_attn_out_raw"], True)
            u_attn = u_attn * post
            post_rms.append(rms)
        o_proj = block.self_attn.o_proj
        u_heads = (u_attn @ o_proj.weight.double()).view(H, d)  # (D,) @ (D, H*d) -> (H, d): per head's slice
        z = v[f"blocks.{i}.attn.hook_z"].view(H, d)  # (H*d,) -> (H, d)
        heads = (z * u_heads).sum(-1)  # (H,)
        bias = 0.0 if o_proj.bias is None else float(o_proj.bias.double() @ u_attn)
        attn_out, mlp_out = v[f"blocks.{i}.hook_attn_out"], v[f"blocks.{i}.hook_mlp_out"]
        attn_rest = float(attn_out @ u) - float(heads.sum()) - bias  # edits of z's sum, o_proj's output, attn_out
        layers.append(LayerParts([float(h) for h in heads], float(mlp_out @ u), attn_rest, bias))
        accounted += attn_out + mlp_out
    other = float((x - accounted) @ u)  # what edits of the residual stream added
    precap = None if cap is None else float(v["unembed.hook_logits_raw"][t])
    return Attribution(t, piece(t), float(logits[t]), embed, layers, other,
                       [iv.label or iv.point for iv in levers.interventions], softcap=cap, logit_precap=precap,
                       final_rms=final_rms, post_rms=post_rms or None, multipliers=multipliers(cfg))


def multipliers(cfg: Any) -> dict[str, float] | None:
    """Granite's constants the parts include (embedding and residual multipliers, logits scaling); None
    for a model without them (all 1)."""
    found = {"embedding_multiplier": cfg.embedding_multiplier, "residual_multiplier": cfg.residual_multiplier,
             "logits_scaling": cfg.logits_scaling}
    return found if any(v != 1.0 for v in found.values()) else None


def attribute_step(session: Any, step: int) -> Attribution:
    """The attribution of the token a session sampled at `step` (0: the prefill's), under its levers."""
    n = len(session.generated_ids)
    if not session.records or not 0 <= step < n:
        raise InputError(f"no step {step} in this run (0 to {n - 1})" if n else "nothing to attribute: run prefill first")
    ids = session.prompt_ids + session.generated_ids[:step]
    return attribute(session.model, ids, session.generated_ids[step], session.levers, session.tokenizer.piece)
