"""On-demand analyses of one recorded forward: attention weights and the logit lens.

Pure functions over tensors a forward kept (post-RoPE queries, last-position residuals, logits) and the
keys read from the KV cache; they never run the model's blocks. Attention weights come from
`inspector.engine.attention.attention_weights`, the function the model's own attention uses, so every
view shows exactly the scale, causal mask and fp32 softmax of the forward it describes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inspector.engine.attention import attention_weights
from inspector.engine.model import Transformer
from inspector.session.records import TopToken

LENS_TOP = 5  # tokens shown per layer in the logit lens


@torch.inference_mode()
def attention_probs(queries: torch.Tensor, keys: torch.Tensor, first_pos: int, n_rep: int) -> torch.Tensor:
    """Weights (B, H, T, S) of queries (B, H, T, d) at positions first_pos.. over keys (B, KV, S, d) at 0..S-1.

    Inputs are upcast to fp32 first: queries of long forwards are stored in fp16, and a bf16 model's keys
    in bf16; the views want the weights, not the model dtype's rounding of the scores."""
    return attention_weights(queries.float(), keys.float(), first_pos, n_rep)


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
