"""The layers of a dense (Llama) forward, top-down in the order the data flows through one block.

`Block.forward` tells the residual story: the stream x is normed and read by attention, whose output is
added back (resid_mid); that is normed and read by the MLP, whose output is added back (resid_post). Below it,
its parts in the order they run: `RMSNorm`, rotary position embeddings (RoPE), `Attention` (project q/k/v,
rotate, write and read the caller's KV cache, attend, o_proj) and the SwiGLU `MLP`.
`inspector.engine.model` embeds the tokens, runs the blocks and unembeds; `inspector.engine.arch` builds each
family's block from these layers, swapping in its own parts (q/k norms, sandwich norms, a mixture of experts
from `inspector.engine.moe`). What the layers call: `inspector.engine.scores` (scaled scores, masks, the
fp32 softmax), `inspector.engine.flash` (the tiled kind), `inspector.engine.linear` (Linear, the weight products),
`inspector.engine.kv_cache` and the trace points of `inspector.engine.trace`.

Module names equal Hugging Face's (`input_layernorm`, `self_attn.q_proj`, `mlp.gate_proj`, ...), so a
checkpoint loads with `strict=True`. Block, Attention and MLP take and return (B, T, D); the norms and RoPE
act on the last dimension. Each layer records its trace points through the `rec` argument it is given.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.config import FULL, ModelConfig
from inspector.engine.flash import TILE, tiled_attend
from inspector.engine.kv_cache import KVCache
from inspector.engine.linear import GATE_UP, QKV, Linear, project, stacked_weight
from inspector.engine.scores import ForwardPlan, masked_scores, plan_mask, softmax32
from inspector.engine.trace import NoHooks, Recorder, edits, record, wants

# A low-precision forward of one query block attends in fp32 while its keys and values (KV * S * d
# elements) stay under this: the CPU's bf16 batched products on decode shapes (a few query rows) cost
# twice the fp32 ones plus the upcast (bench/engine.py --profile bf16); past it, the upcast copies dominate.
UPCAST_MAX_KEY_ELEMENTS = 1 << 17
ATTENTION_KINDS = ("standard", "tiled")


class Block(NoHooks, nn.Module):
    """One layer: x + attn(norm(x)), then h + mlp(norm(h)). Llama's parts unless a family passes its own
    attention, MLP and norm classes (`inspector.engine.arch`)."""

    kind = FULL  # how its attention masks keys (config.layer_type); set per layer by arch.build_block
    mlp_name = "mlp"  # the MLP's module name in the checkpoint

    def __init__(self, config: ModelConfig, layer: int, attention: type | None = None, mlp: type | None = None,
                 norm: type | None = None) -> None:
        super().__init__()
        self.layer = layer
        norm = norm or RMSNorm
        self.input_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = (attention or Attention)(config, layer)
        self.post_attention_layernorm = norm(config.hidden_size, config.rms_norm_eps)
        setattr(self, self.mlp_name, (mlp or MLP)(config, layer))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        p = f"blocks.{self.layer}."
        x = record(rec, p + "hook_resid_pre", x)
        normed = record(rec, p + "ln1.hook_normalized", self.input_layernorm(x))
        attn_out = record(rec, p + "hook_attn_out", self.self_attn(normed, cos, sin, cache, plan, rec))
        h = record(rec, p + "hook_resid_mid", x + attn_out)
        normed = record(rec, p + "ln2.hook_normalized", self.post_attention_layernorm(h))
        mlp_out = record(rec, p + "hook_mlp_out", self.mlp(normed, rec))
        return record(rec, p + "hook_resid_post", h + mlp_out)


class RMSNorm(NoHooks, nn.Module):
    """x / rms(x) * weight, computed in fp32 (as HF LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.rms_norm computes x * rsqrt(mean(x^2) + eps) * weight in that order, bit for bit HF's formula in
        # fp32, in one call instead of six (a decode step norms 61 times)
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if x.device.type == "cpu":  # the CPU kernel computes in fp32 and rounds once: HF's rounding, two copies fewer
            return self.weight * F.rms_norm(x, self.weight.shape, None, self.eps)
        return self.weight * F.rms_norm(x.float(), self.weight.shape, None, self.eps).to(x.dtype)  # fp32 statistics


class GemmaRMSNorm(RMSNorm):
    """x / rms(x) * (1 + weight), computed in fp32 and rounded once at the end (as transformers' Gemma)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__(dim, eps)
        nn.init.zeros_(self.weight)  # (1 + 0): the identity scale, as a fresh Gemma norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        inv_rms = x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()  # (..., 1)
        out = x32 * inv_rms * (1.0 + self.weight.float())
        return out if x.dtype == torch.float32 else out.to(x.dtype)


# Rotary position embeddings, Hugging Face's rotate_half layout. The model computes cos/sin once per
# forward (`rope_inv_freq`, `rope_cos_sin`); attention rotates q and k with `apply_rope`; the KV cache's
# re-rotation of kept keys and the views use the same functions, so a key is rotated one way.

def rope_inv_freq(config: ModelConfig, theta: float | None = None) -> torch.Tensor:
    """Inverse frequencies (head_dim/2,), with Llama 3 scaling when `rope_scaling` asks for it; `theta`
    (a sliding layer's own base) replaces rope_theta and its scaling."""
    d = config.head_dim
    base = config.rope_theta if theta is None else theta
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if theta is not None:
        return inv_freq
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
    """cos, sin of shape (*positions.shape, head_dim) for the given positions (HF layout: halves repeated)."""
    freqs = positions.float()[..., None] * inv_freq  # (..., T, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (..., T, head_dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with its first half negated: what `apply_rope` multiplies the half-rolled x by."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotate (..., head_dim) by position: x*cos + rotate_half(x)*sin, HF's rotate_half RoPE.

    rotate_half(x) = cat(-x2, x1) is x rolled by half a head with its first half negated; the negation
    is moved onto sin (`signed_sin`, exact in floating point), so the rotation is one roll."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


class Attention(NoHooks, nn.Module):
    """Grouped-query causal self-attention with RoPE, written out in full (scores, mask, fp32 softmax)."""

    kind = "standard"  # or "tiled", per layer (`set_attention`)
    tile = TILE  # key positions per tile of the tiled kind

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.n_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.n_rep = config.n_rep
        D = config.hidden_size
        self.q_proj = Linear(D, self.n_heads * self.head_dim, bias=config.qkv_bias)
        self.k_proj = Linear(D, self.n_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.v_proj = Linear(D, self.n_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = Linear(self.n_heads * self.head_dim, D, bias=config.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                plan: ForwardPlan, rec: Recorder | None) -> torch.Tensor:
        B, T, _ = x.shape
        H, KV, d = self.n_heads, self.n_kv_heads, self.head_dim
        p = f"blocks.{self.layer}.attn."
        qkv = self._qkv(x).view(B, T, H + 2 * KV, d).transpose(1, 2)  # (B, H + 2KV, T, d): q heads, k heads, v heads
        q, k, v = qkv.split((H, KV, KV), dim=1)  # views; one call instead of three slices
        q2, k2 = record(rec, p + "hook_q", q), record(rec, p + "hook_k", k)
        v = record(rec, p + "hook_v", v)
        q2, k2 = self.normalize_qk(q2, k2, rec)
        unrotated = qkv.narrow(1, 0, H + KV) if q2 is q and k2 is k else torch.cat([q2, k2], dim=1)  # (B, H + KV, T, d)
        q, k = apply_rope(unrotated, cos, sin).split((H, KV), dim=1)  # q and k rotated together
        q, k = record(rec, p + "hook_rot_q", q), record(rec, p + "hook_rot_k", k)
        hidden = None
        if cache is not None:
            k, v = cache.update(self.layer, k, v, plan.counts)  # (B, KV, S, d), S = the longest row's end
            hidden = cache.evicted_mask(self.layer, k.shape[2])  # (B, 1 or H, 1, S) or None
        z = self._attend(q, k, v, plan, hidden, rec)  # (B, H, T, d)
        z = z.transpose(1, 2).reshape(B, T, H * d)  # (B, T, H*d)
        z = record(rec, p + "hook_z", z)
        return self.o_proj(z)

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor, rec: Recorder | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys before RoPE: unchanged here; families with q/k norms override it."""
        return q, k

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """q, k, v projections side by side (B, T, (H + 2KV) * d): one product when their weights are stacked."""
        weight = stacked_weight(self, QKV)
        has_bias = getattr(self.q_proj, "bias", None) is not None
        bias = stacked_weight(self, QKV, "bias") if has_bias else None
        if weight is None or (has_bias and bias is None):
            return torch.cat([getattr(self, n)(x) for n in QKV], dim=-1)
        return project(x, weight, bias)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: ForwardPlan,
                hidden: torch.Tensor | None, rec: Recorder | None) -> torch.Tensor:
        """Queries (B, H, T, d) over keys/values (B, KV, S, d) of positions 0..S-1 -> (B, H, T, d).

        `hidden` (B, 1 or H, 1, S) bool marks cached positions a KV-cache policy evicted (masked like the future).
        Long forwards (a prompt) attend in blocks of queries (see `plan.blocks`): the (H, T, S) scores of a
        2,048-token prompt would be 150 MB twice over (scores, pattern) per layer. A block reads only the
        keys its queries can see. The scores and pattern trace points fire once per forward with the
        whole (B, H, T, S) maps, assembled only when the recorder wants them; a recorder that edits them
        (an intervention) gets them before they are used, over one block of every query.
        The tiled kind computes the output tile by tile; a recorder that wants the maps gets them computed
        in full beside it (for the record only), and one that edits them, or a sliding-window layer's plan,
        runs the standard path."""
        B, H, T, d = q.shape
        KV, S, p = self.n_kv_heads, k.shape[2], f"blocks.{self.layer}.attn."
        want_scores, want_pattern = wants(rec, p + "hook_attn_scores"), wants(rec, p + "hook_pattern")
        editing = edits(rec, p + "hook_attn_scores") or edits(rec, p + "hook_pattern")
        if self.kind == "tiled" and not editing and plan.window is None:
            z = tiled_attend(q, k, v, plan.first if plan.first is not None else plan.positions, hidden, self.n_rep,
                             self.tile)
            if want_scores or want_pattern:
                future = plan_mask(plan, T, S)
                future = hidden if future is None else (future if hidden is None else future | hidden)
                scores = masked_scores(q, k, future, self.n_rep)  # (B, H, T, S), for the recorder only
                if want_scores:
                    record(rec, p + "hook_attn_scores", scores)
                if want_pattern:
                    record(rec, p + "hook_pattern", softmax32(scores))
            return z
        if editing:
            future = plan_mask(plan, T, S)
            future = hidden if future is None else (future if hidden is None else future | hidden)
            scores = record(rec, p + "hook_attn_scores", masked_scores(q, k, future, self.n_rep))  # (B, H, T, S)
            pattern = record(rec, p + "hook_pattern", softmax32(scores)).to(q.dtype)  # (B, H, T, S)
            z = torch.bmm(pattern.reshape(B * KV, self.n_rep * T, S), v.reshape(B * KV, S, d))  # (B*KV, n_rep*T, d)
            return z.view(B, H, T, d)
        one = len(plan.blocks) == 1
        all_scores = all_pattern = None
        if not one and want_scores:
            all_scores = q.new_full((B, H, T, S), float("-inf"))  # keys past a block's reach stay masked
        if not one and want_pattern:
            all_pattern = q.new_zeros((B, H, T, S))
        out, dtype = [], q.dtype
        if one and dtype != torch.float32 and q.device.type == "cpu" and KV * S * d <= UPCAST_MAX_KEY_ELEMENTS:
            q, k, v = q.float(), k.float(), v.float()  # see UPCAST_MAX_KEY_ELEMENTS; z is cast back below
        for blk in plan.blocks:
            n, Tb = blk.n_keys, blk.t1 - blk.t0
            qb = q if one else q[:, :, blk.t0:blk.t1]  # (B, H, Tb, d)
            future = blk.future
            if hidden is not None:
                future = hidden[..., :n] if future is None else future | hidden[..., :n]
            kb, vb = (k, v) if n == S else (k[:, :, :n], v[:, :, :n])  # (B, KV, n, d)
            scores = masked_scores(qb, kb, future, self.n_rep)  # (B, H, Tb, n)
            pattern = softmax32(scores)  # (B, H, Tb, n) fp32
            pattern = pattern if q.dtype == torch.float32 else pattern.to(q.dtype)
            z = torch.bmm(pattern.view(B * KV, self.n_rep * Tb, n), vb.reshape(B * KV, n, d))  # (B*KV, n_rep*Tb, d)
            out.append(z.view(B, H, Tb, d))
            if all_scores is not None:
                all_scores[:, :, blk.t0:blk.t1, :n] = scores
            if all_pattern is not None:
                all_pattern[:, :, blk.t0:blk.t1, :n] = pattern
        if want_scores:
            record(rec, p + "hook_attn_scores", scores.to(dtype) if one else all_scores)  # in the model's dtype
        if want_pattern:
            record(rec, p + "hook_pattern", pattern if one else all_pattern)
        return out[0].to(dtype) if one else torch.cat(out, dim=2)  # (B, H, T, d)


class MLP(NoHooks, nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)); a family may set another `activation` (Gemma's GELU-tanh)."""

    activation = staticmethod(F.silu)

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        weight = stacked_weight(self, GATE_UP)
        if weight is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = project(x, weight).chunk(2, dim=-1)  # (B, T, I) each, views of one product
        gate = record(rec, f"blocks.{self.layer}.mlp.hook_pre", gate)
        act = record(rec, f"blocks.{self.layer}.mlp.hook_post", self.activation(gate) * up)
        return self.down_proj(act)


# Attention variants several families share (`inspector.engine.arch`).

class QKNormAttention(Attention):
    """Attention with an RMSNorm over each head's queries (`q_norm`) and keys (`k_norm`) before RoPE."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        norm = GemmaRMSNorm if config.gemma else RMSNorm  # Gemma 3's are (1 + w)
        self.q_norm = norm(config.head_dim, config.rms_norm_eps)
        self.k_norm = norm(config.head_dim, config.rms_norm_eps)

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor, rec: Recorder | None) -> tuple[torch.Tensor, torch.Tensor]:
        p = f"blocks.{self.layer}.attn."
        return record(rec, p + "hook_q_normed", self.q_norm(q)), record(rec, p + "hook_k_normed", self.k_norm(k))


class ScaledAttention(Attention):
    """Scores q.k times the config's `attn_scale` instead of head_dim^-1/2: the queries are multiplied by
    attn_scale * sqrt(head_dim) before `masked_scores` divides by sqrt(head_dim)."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        self.q_factor = config.attn_scale * math.sqrt(config.head_dim)  # 1.0 when the two scales agree

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: ForwardPlan,
                hidden: torch.Tensor | None, rec: Recorder | None) -> torch.Tensor:
        return super()._attend(self.scale(q), k, v, plan, hidden, rec)

    def scale(self, q: torch.Tensor) -> torch.Tensor:
        """q times `q_factor` (q itself when that is 1)."""
        return q if self.q_factor == 1.0 else q * self.q_factor
