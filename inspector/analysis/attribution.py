"""Direct logit attribution: one token's logit split into what each part of the model wrote.

The residual stream at the last position after the last block is a sum: the token's embedding, each
layer's attention output (o_proj of the heads' z: head h writes W_O[:, h*d:(h+1)*d] @ z_h) and each
layer's MLP output. The logit is unembed[t] . (norm_weight * x / rms(x)); freezing rms(x) at this
position (it is one number for the whole sum) makes the logit linear in x, so with
u = unembed[t] * norm_weight / rms(x) each part contributes u . part and the parts sum to the logit (to
fp32 rounding; the parts are computed in fp64 from the recorded fp32 activations). What the run's
interventions added is accounted too: an edit of the attention output after o_proj (`attn_rest`) and
of the residual stream itself, e.g. steering (`other`), so the sum stays the logit under any lever.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from inspector.analysis.records import Attribution, LayerParts
from inspector.engine import steps
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.levers import Levers, check_interventions


class _LastPosition:
    """Keeps the last position's embedding, every layer's z, attention and MLP output, and the final residual."""

    def __init__(self, num_layers: int) -> None:
        self.last = f"blocks.{num_layers - 1}.hook_resid_post"
        self.names = {"hook_embed", self.last}
        for i in range(num_layers):
            self.names |= {f"blocks.{i}.attn.hook_z", f"blocks.{i}.hook_attn_out", f"blocks.{i}.hook_mlp_out"}
        self.values: dict[str, torch.Tensor] = {}

    def wants(self, name: str) -> bool:
        return name in self.names

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name in self.names:
            self.values[name] = value[0, -1].detach().double()


@torch.inference_mode()
def attribute(model: Transformer, ids: Sequence[int], token: int | None = None, levers: Levers = loop.NO_LEVERS,
              piece: Callable[[int], str] = str) -> Attribution:
    """The logit of `token` (default: the top-1) as the next token after `ids`, split into its parts."""
    cfg = model.config
    if not ids:
        raise InputError("the prompt is empty: give it some text")
    check_interventions(levers.interventions, cfg.num_hidden_layers)
    rec = _LastPosition(cfg.num_hidden_layers)
    logits = loop.forward(model, steps.new_cache(model), [list(ids)], Levers(interventions=levers.interventions), rec)[0]
    t = int(logits.argmax()) if token is None else int(token)
    if not 0 <= t < cfg.vocab_size:
        raise InputError(f"token id must be from 0 to {cfg.vocab_size - 1}, got {t}")
    v = rec.values
    x = v[rec.last]  # (D,) the residual stream entering the final norm
    inv_rms = 1.0 / torch.sqrt(x.pow(2).mean() + cfg.rms_norm_eps)  # the frozen scale
    u = model.unembed_weight[t].double() * model.model.norm.weight.double() * inv_rms  # (D,)
    H, d = cfg.num_attention_heads, cfg.head_dim
    embed = float(v["hook_embed"] @ u)
    layers, accounted = [], v["hook_embed"].clone()
    for i, block in enumerate(model.model.layers):
        w_o = block.self_attn.o_proj.weight.double()  # (D, H*d)
        u_heads = (u @ w_o).view(H, d)  # (H, d): u read back through each head's slice of o_proj
        z = v[f"blocks.{i}.attn.hook_z"].view(H, d)  # (H*d,) -> (H, d)
        heads = (z * u_heads).sum(-1)  # (H,)
        attn_out, mlp_out = v[f"blocks.{i}.hook_attn_out"], v[f"blocks.{i}.hook_mlp_out"]
        attn_rest = float(attn_out @ u) - float(heads.sum())  # o_proj bias, edits of the attention output
        layers.append(LayerParts([float(h) for h in heads], float(mlp_out @ u), attn_rest))
        accounted += attn_out + mlp_out
    other = float((x - accounted) @ u)  # what edits of the residual stream added
    return Attribution(t, piece(t), float(logits[t]), embed, layers, other,
                       [iv.label or iv.point for iv in levers.interventions])


def attribute_step(session: Any, step: int) -> Attribution:
    """The attribution of the token a session sampled at `step` (0: the prefill's), under its levers."""
    n = len(session.generated_ids)
    if not session.records or not 0 <= step < n:
        raise InputError(f"no step {step} in this run (0 to {n - 1})" if n else "nothing to attribute: run prefill first")
    ids = session.prompt_ids + session.generated_ids[:step]
    return attribute(session.model, ids, session.generated_ids[step], session.levers, session.tokenizer.piece)
