"""OLMoE: the Llama block with RMSNorms over the whole query and key projections (`q_norm` over all heads'
queries, hidden_size wide; `k_norm` over all KV heads' keys) before RoPE, and a sparse mixture of experts
as its MLP (`mlp.gate`, `mlp.experts.{e}.gate_proj/up_proj/down_proj`): softmax, top-k, renormalised only
when `norm_topk_prob`."""

from __future__ import annotations

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Attention, Block, RMSNorm
from inspector.engine.moe import ListExperts
from inspector.engine.trace import Recorder, record

FEATURES = ("RMSNorm over all heads' queries and over all keys (q_norm, k_norm)",
            "sparse mixture-of-experts MLP: softmax, top-k (renormalised when norm_topk_prob)")


class WholeQKNormAttention(Attention):
    """Attention whose q_norm / k_norm normalise each token's whole query (H*d) and key (KV*d) projection."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        self.q_norm = RMSNorm(self.n_heads * self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.n_kv_heads * self.head_dim, config.rms_norm_eps)

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor, rec: Recorder | None) -> tuple[torch.Tensor, torch.Tensor]:
        p = f"blocks.{self.layer}.attn."
        return (record(rec, p + "hook_q_normed", _across_heads(self.q_norm, q)),
                record(rec, p + "hook_k_normed", _across_heads(self.k_norm, k)))


def _across_heads(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """`norm` over each token's heads side by side: (B, n, T, d) -> (B, T, n*d) -> normed -> (B, n, T, d)."""
    B, n, T, d = x.shape
    flat = x.transpose(1, 2).reshape(B, T, n * d)  # (B, T, n*d)
    return norm(flat).view(B, T, n, d).transpose(1, 2)  # (B, n, T, d)


def build_block(config: ModelConfig, layer: int) -> Block:
    return Block(config, layer, attention=WholeQKNormAttention, mlp=ListExperts)
