"""Gemma 2: the sandwich block (`SandwichBlock`: norms before and after both attention and the MLP) with
(1 + w) norms and a GELU-tanh MLP (`GeluMLP`); scores scaled by query_pre_attn_scalar^-1/2 and soft-capped
(cap * tanh(s / cap), before the mask); sliding and global layers alternating; embeddings times sqrt(D) and the final logits soft-capped (the model).

Soft-capped attention computes one (B, H, T, S) block of all queries (no query blocks): the cap must
act before the mask, so it cannot reuse the blocked path. `attn.hook_attn_scores` holds the capped scores,
the ones the softmax sees."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import KVCache
from inspector.engine.layers import MLP, Block, GemmaRMSNorm, QKNormAttention, ScaledAttention
from inspector.engine.scores import ForwardPlan, masked_scores, plan_mask, softmax32
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


class SandwichBlock(Block):
    """Gemma's block: norms before and after both attention and MLP. `post_attention_layernorm` (HF's
    name) normalises attention's output; `pre_feedforward_layernorm` the MLP's input."""

    def __init__(self, config: ModelConfig, layer: int, attention: type, mlp: type, norm: type) -> None:
        super().__init__(config, layer, attention, mlp, norm)
        self.pre_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        self.post_feedforward_layernorm = norm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        p = f"blocks.{self.layer}."
        x = record(rec, p + "hook_resid_pre", x)
        normed = record(rec, p + "ln1.hook_normalized", self.input_layernorm(x))
        raw = record(rec, p + "hook_attn_out_raw", self.self_attn(normed, cos, sin, cache, plan, rec))
        attn_out = record(rec, p + "hook_attn_out", self.post_attention_layernorm(raw))
        h = record(rec, p + "hook_resid_mid", x + attn_out)
        normed = record(rec, p + "ln2.hook_normalized", self.pre_feedforward_layernorm(h))
        raw = record(rec, p + "hook_mlp_out_raw", self.mlp(normed, rec))
        mlp_out = record(rec, p + "hook_mlp_out", self.post_feedforward_layernorm(raw))
        return record(rec, p + "hook_resid_post", h + mlp_out)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (transformers' gelu_pytorch_tanh)."""
    return F.gelu(x, approximate="tanh")


class GeluMLP(MLP):
    """down(gelu_tanh(gate(x)) * up(x)): Gemma's gated MLP."""

    activation = staticmethod(gelu_tanh)


def mlp_class(config: ModelConfig) -> type:
    """The config's gated MLP: GELU-tanh (`hidden_act` gelu_pytorch_tanh) or SwiGLU."""
    return GeluMLP if config.hidden_act == "gelu_pytorch_tanh" else MLP


def build_block(config: ModelConfig, layer: int) -> Block:
    return SandwichBlock(config, layer, GemmaAttention, mlp_class(config), GemmaRMSNorm)
