"""On-demand analyses of one recorded forward: attention weights, the logit lens and its commitment layer.

Pure functions over tensors a forward kept (post-RoPE queries, last-position residuals, logits) and the
keys read from the KV cache; they never run the model's blocks. Attention weights come from
`inspector.engine.scores.attention_weights`, the function the model's own attention uses, so every
view shows exactly the scale, causal mask and fp32 softmax of the forward it describes; given the model's
config and the layer, a family's own scale (query_pre_attn_scalar), score soft-cap and a sliding layer's
window are applied as the model applies them.
"""

from __future__ import annotations

from collections.abc import Callable

import math

import torch

from inspector.engine.scores import attention_weights, future_mask, masked_scores, softmax32, window_mask
from inspector.engine.config import SLIDING, ModelConfig
from inspector.engine.model import Transformer
from inspector.session.records import TopToken, commitment_layer

LENS_TOP = 5  # tokens shown per layer in the logit lens


@torch.inference_mode()
def attention_probs(queries: torch.Tensor, keys: torch.Tensor, first_pos: int, n_rep: int,
                    config: ModelConfig | None = None, layer: int = 0) -> torch.Tensor:
    """Weights (B, H, T, S) of queries (B, H, T, d) at positions first_pos.. over keys (B, KV, S, d) at 0..S-1,
    as layer `layer` of a model of `config` computes them (None: plain scaled dot-product attention).

    Inputs are upcast to fp32 first: queries of long forwards are stored in fp16, and a bf16 model's keys
    in bf16; the views want the weights, not the model dtype's rounding of the scores."""
    q, k = queries.float(), keys.float()
    if config is None:
        return attention_weights(q, k, first_pos, n_rep)
    T, S = q.shape[2], k.shape[2]
    factor = config.attn_scale * math.sqrt(config.head_dim)  # masked_scores divides by sqrt(d)
    scores = masked_scores(q * factor if factor != 1.0 else q, k, None, n_rep)  # (B, H, T, S)
    cap = config.attn_logit_softcapping
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap  # before the mask, as the model
    hidden = future_mask(first_pos, T, S, q.device)
    if config.layer_type(layer) == SLIDING:
        old = window_mask(first_pos, T, S, config.sliding_window, q.device)
        hidden = old if hidden is None else (hidden if old is None else hidden | old)
    if hidden is not None:
        scores = scores.masked_fill(hidden, float("-inf"))
    return softmax32(scores)


@torch.inference_mode()
def logit_lens(model: Transformer, piece: Callable[[int], str], resid: torch.Tensor,
               logits: torch.Tensor) -> list[list[TopToken]]:
    """Top-5 of final norm + LM head on each layer's last residual (layers, D); the last layer reuses the
    real logits (V,), so the lens ends exactly at what was sampled from."""
    lens_logits = torch.cat([model.unembed(resid[:-1]).float(), logits[None]])  # (layers, V)
    top = torch.topk(lens_logits, LENS_TOP, dim=-1)  # (layers, 5)
    probs = (top.values - torch.logsumexp(lens_logits, dim=-1, keepdim=True)).exp()  # softmax of the top 5
    return [
        [TopToken(i, piece(i), v, p) for i, v, p in zip(ids, vals, ps)]
        for ids, vals, ps in zip(top.indices.tolist(), top.values.tolist(), probs.tolist())
    ]


# Lens rows unembedded at a time when looking for the commitment layer from the top down: the first try
# reads only the last layer below the output (about half of the tokens are decided only there), later tries
# several layers per read of the LM head.
COMMITMENT_FIRST, COMMITMENT_CHUNK = 1, 8


@torch.inference_mode()
def commitment(model: Transformer, resid: torch.Tensor, logits: torch.Tensor) -> list[int]:
    """[commitment layer, final top-1 id]: `commitment_layer` of the lens's top-1 ids (resid (layers, D) as
    `logit_lens` takes it, the last layer being the real logits), found from the top layer down, stopping at
    the first layer whose top-1 differs: on average a third of the whole lens's LM-head work."""
    final = int(torch.topk(logits.float(), 1).indices)
    hi, size = resid.shape[0] - 1, COMMITMENT_FIRST  # lens rows hi.. are known to agree with the final top-1
    while hi > 0:
        lo = max(0, hi - size)
        top1 = torch.topk(model.unembed(resid[lo:hi]).float(), 1, dim=-1).indices[:, 0].tolist()  # rows lo..hi-1
        layer = commitment_layer([*top1, final])
        if layer > 0:
            return [lo + layer, final]
        hi, size = lo, COMMITMENT_CHUNK
    return [0, final]
