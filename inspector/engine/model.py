"""A Llama-family decoder in plain PyTorch (Llama, SmolLM, Qwen2), instrumented with trace points.

Module names equal Hugging Face's (`model.embed_tokens`, `model.layers.{i}.self_attn.q_proj`, ...,
`model.norm`, `lm_head`), so an HF state dict loads with `strict=True`; a model with tied embeddings has
no `lm_head` module and unembeds with `model.embed_tokens.weight`.

Contract: `Transformer.forward(input_ids, cache=None, rec=None, last_only=False) -> logits`. The caller
owns the KV cache: the model writes this forward's keys/values into it and reads the positions before,
but never advances it (the engine calls `cache.advance(T)` once per forward). Without a cache the input
is the whole sequence from position 0. `rec(name, tensor)` is called at every trace point of
`inspector.engine.trace` when a recorder is given.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import KVCache
from inspector.engine.trace import Recorder


# Queries per attention block; longer forwards record scores/pattern once per block. 128 keeps a block's
# scores of a 512-token prompt (9 heads) at 2.4 MB: under the 4 MB mmap threshold (inspector.engine.memory), so
# they reuse heap memory instead of page-faulting fresh mappings (512 made that prefill ~40% slower).
ATTN_CHUNK = 128


def record(rec: Recorder | None, name: str, value: torch.Tensor) -> None:
    if rec is not None:
        rec(name, value)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 (as HF LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Inverse frequencies (head_dim/2,), with Llama 3 scaling when `rope_scaling` asks for it."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = config.rope_scaling
    if s is None:
        return inv_freq
    # Llama 3: keep high frequencies, divide low ones by `factor`, blend smoothly in between.
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"]
    )
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (T, head_dim) for the given positions (HF layout: halves repeated)."""
    freqs = positions.float()[:, None] * inv_freq[None, :]  # (T, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, head_dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, heads, T, head_dim) by position: x*cos + rotate_half(x)*sin."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    """Grouped-query causal self-attention with RoPE, written out in full (scores, mask, fp32 softmax)."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.n_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.n_rep = config.n_rep
        D = config.hidden_size
        self.q_proj = nn.Linear(D, self.n_heads * self.head_dim, bias=config.qkv_bias)
        self.k_proj = nn.Linear(D, self.n_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.v_proj = nn.Linear(D, self.n_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, D, bias=config.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                rec: Recorder | None) -> torch.Tensor:
        B, T, _ = x.shape
        p = f"blocks.{self.layer}.attn."
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, KV, T, d)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, KV, T, d)
        record(rec, p + "hook_q", q)
        record(rec, p + "hook_k", k)
        record(rec, p + "hook_v", v)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        record(rec, p + "hook_rot_q", q)
        record(rec, p + "hook_rot_k", k)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # (B, KV, S, d), S = cached + T
        # Long forwards (a prompt) attend in blocks of ATTN_CHUNK queries: the (H, T, S) scores of a
        # 2,048-token prompt would be 150 MB twice over (scores, pattern) per layer. A block's queries
        # see no key past its last position, so it reads only the keys up to there.
        first = k.shape[2] - T  # position of this forward's first query
        blocks = [self._attend(q[:, :, t0:t0 + ATTN_CHUNK], k[:, :, :first + t0 + ATTN_CHUNK],
                               v[:, :, :first + t0 + ATTN_CHUNK], first + t0, rec)
                  for t0 in range(0, T, ATTN_CHUNK)]
        z = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)  # (B, H, T, d)
        z = z.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*d)
        record(rec, p + "hook_z", z)
        return self.o_proj(z)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first_pos: int,
                rec: Recorder | None) -> torch.Tensor:
        """Queries (B, H, T, d) at positions first_pos.. over keys/values (B, KV, S, d) of positions 0..S-1,
        S = first_pos + T -> (B, H, T, d)."""
        B, _, T, d = q.shape
        S, KV, p = k.shape[2], self.n_kv_heads, f"blocks.{self.layer}.attn."
        # Each KV head serves n_rep consecutive query heads. Group the queries by KV head instead of
        # copying K and V n_rep times: (B, H, T, d) -> (B, KV, n_rep*T, d), one matmul per KV head.
        qg = q.reshape(B, KV, self.n_rep * T, d)  # (B, KV, n_rep*T, d)
        scores = torch.matmul(qg, k.transpose(2, 3)) / math.sqrt(d)  # (B, KV, n_rep*T, S)
        scores = scores.view(B, self.n_heads, T, S)  # (B, H, T, S)
        # Query i sits at position first_pos + i and may see keys 0 .. first_pos + i.
        causal = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=first_pos)
        scores = scores.masked_fill_(~causal, float("-inf"))  # in place: one (H, T, S) copy, not two
        record(rec, p + "hook_attn_scores", scores)
        pattern = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # (B, H, T, S)
        record(rec, p + "hook_pattern", pattern)
        z = torch.matmul(pattern.view(B, KV, self.n_rep * T, S), v)  # (B, KV, n_rep*T, d)
        return z.view(B, self.n_heads, T, d)  # (B, H, T, d)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        gate = self.gate_proj(x)
        record(rec, f"blocks.{self.layer}.mlp.hook_pre", gate)
        act = F.silu(gate) * self.up_proj(x)
        record(rec, f"blocks.{self.layer}.mlp.hook_post", act)
        return self.down_proj(act)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config, layer)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                rec: Recorder | None) -> torch.Tensor:
        p = f"blocks.{self.layer}."
        record(rec, p + "hook_resid_pre", x)
        normed = self.input_layernorm(x)
        record(rec, p + "ln1.hook_normalized", normed)
        attn_out = self.self_attn(normed, cos, sin, cache, rec)
        record(rec, p + "hook_attn_out", attn_out)
        h = x + attn_out
        record(rec, p + "hook_resid_mid", h)
        normed = self.post_attention_layernorm(h)
        record(rec, p + "ln2.hook_normalized", normed)
        mlp_out = self.mlp(normed, rec)
        record(rec, p + "hook_mlp_out", mlp_out)
        out = h + mlp_out
        record(rec, p + "hook_resid_post", out)
        return out


class Backbone(nn.Module):
    """HF's `model.*`: embeddings, the blocks, the final norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)

    @property
    def unembed_weight(self) -> torch.Tensor:
        """(V, D): the LM head, which is the embedding matrix when tied."""
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def unembed(self, resid: torch.Tensor) -> torch.Tensor:
        """Final norm then LM head: residual (..., D) -> logits (..., V). Also the logit lens."""
        return F.linear(self.model.norm(resid), self.unembed_weight)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, rec: Recorder | None = None,
                last_only: bool = False) -> torch.Tensor:
        B, T = input_ids.shape
        start = cache.length if cache is not None else 0
        x = self.model.embed_tokens(input_ids)  # (B, T, D)
        record(rec, "hook_embed", x)
        positions = torch.arange(start, start + T, device=input_ids.device)
        cos, sin = rope_cos_sin(self.inv_freq, positions, x.dtype)  # (T, d) each
        for block in self.model.layers:
            x = block(x, cos, sin, cache, rec)
        if last_only:
            x = x[:, -1:]  # (B, 1, D): prefill needs only the next token's logits
        x = self.model.norm(x)
        record(rec, "ln_final.hook_normalized", x)
        logits = F.linear(x, self.unembed_weight)  # (B, T or 1, V)
        record(rec, "unembed.hook_logits", logits)
        return logits
