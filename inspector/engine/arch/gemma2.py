"""Gemma 2: the sandwich block (`layers.block.SandwichBlock`) with (1 + w) norms and a GELU-tanh MLP; scores
scaled by query_pre_attn_scalar^-1/2 and soft-capped (cap * tanh(s / cap), before the mask); sliding
and global layers alternating; embeddings times sqrt(D) and the final logits soft-capped (the model).

Soft-capped attention computes one (B, H, T, S) block of all queries (no query blocks): the cap must
act before the mask, so it cannot reuse the blocked path. `attn.hook_attn_scores` holds the capped scores,
the ones the softmax sees."""

from __future__ import annotations

import torch

from inspector.engine.attention import ForwardPlan, masked_scores, plan_mask, softmax32
from inspector.engine.config import ModelConfig
from inspector.engine.layers.attention import QKNormAttention, ScaledAttention
from inspector.engine.layers.block import Block, SandwichBlock
from inspector.engine.layers.mlp import mlp_class
from inspector.engine.layers.norm import GemmaRMSNorm
from inspector.engine.trace import Recorder, record, wants

FEATURES = ("(1 + w) RMSNorms", "post-attention and post-feed-forward norms", "GELU-tanh gated MLP",
            "embeddings scaled by sqrt(hidden)", "query_pre_attn_scalar", "attention logit soft-cap",
            "final logit soft-cap", "alternating sliding-window and global layers")


class GemmaAttention(ScaledAttention):
    """Queries scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2; scores soft-capped when the
    config says so."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        self.score_cap = config.attn_logit_softcapping

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: ForwardPlan,
                hidden: torch.Tensor | None, rec: Recorder | None) -> torch.Tensor:
        if self.score_cap is None:
            return super()._attend(q, k, v, plan, hidden, rec)
        q = self.scale(q)  # masked_scores divides by sqrt(d): together, the family's scale
        B, H, T, d = q.shape
        KV, S, p = self.n_kv_heads, k.shape[2], f"blocks.{self.layer}.attn."
        mask = plan_mask(plan, T, S)  # future (and window) keys
        mask = hidden if mask is None else (mask if hidden is None else mask | hidden)
        scores = masked_scores(q, k, None, self.n_rep)  # (B, H, T, S), unmasked
        scores = torch.tanh(scores / self.score_cap) * self.score_cap
        if mask is not None:
            scores = scores.masked_fill_(mask, float("-inf"))
        if wants(rec, p + "hook_attn_scores"):
            scores = record(rec, p + "hook_attn_scores", scores)
        pattern = softmax32(scores)  # (B, H, T, S) fp32
        if wants(rec, p + "hook_pattern"):
            pattern = record(rec, p + "hook_pattern", pattern)
        pattern = pattern.to(q.dtype)
        z = torch.bmm(pattern.reshape(B * KV, self.n_rep * T, S), v.reshape(B * KV, S, d))  # (B*KV, n_rep*T, d)
        return z.view(B, H, T, d)


class GemmaQKNormAttention(QKNormAttention, GemmaAttention):
    """Gemma 3's attention: (1 + w) q/k norms, then Gemma's scaling."""


def build_block(config: ModelConfig, layer: int) -> Block:
    return SandwichBlock(config, layer, GemmaAttention, mlp_class(config), GemmaRMSNorm)
