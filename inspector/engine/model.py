"""A Llama-family decoder in plain PyTorch (Llama, SmolLM, Qwen2), instrumented with trace points.

The other families (Qwen3, Mistral, Phi-3, Gemma 2, Gemma 3) are these classes specialised in
`inspector.engine.arch` (its `build_block` picks a layer's classes from the config); the model itself adds
only what sits outside the blocks: Gemma's embedding scale, a second RoPE base for sliding layers, each
layer kind's mask (`attention.windowed`) and the final logit soft-cap.

Module names equal Hugging Face's (`model.embed_tokens`, `model.layers.{i}.self_attn.q_proj`, ...,
`model.norm`, `lm_head`), so an HF state dict loads with `strict=True`; a model with tied embeddings has
no `lm_head` module and unembeds with `model.embed_tokens.weight`.

Contract: `Transformer.forward(input_ids (B, T), cache=None, rec=None, positions=None, last_only=False,
n_layers=None) -> logits (B, T, V)`, or (B, 1, V) holding each row's last real token with `last_only`.
- `n_layers` L runs only the first L blocks, then the final norm and LM head (the logit lens at layer L
  as a model of its own: the early-exit draft model); its cache is written for those L layers only.
- Rows are independent requests, each at its own position. Row b's new tokens sit at positions
  cache.lengths[b], cache.lengths[b] + 1, ... (0, 1, ... without a cache).
- `positions` None: all T slots of every row are real tokens. Otherwise a (B, T) long tensor giving each
  row's real tokens first, at exactly those positions, then -1 for padded slots (rows with fewer new
  tokens, right-padded); ValueError otherwise. Padded slots are computed as if at position 0 and their
  outputs (logits, trace values) mean nothing; they are never written to the cache.
- Causal mask from positions: a query at position p sees the keys at positions <= p of its own row (the
  cached ones and this forward's).
- The caller owns the KV cache: the model writes each row's real keys/values after its committed
  positions and reads them back, but never advances it (the engine calls `cache.advance(counts)` once
  per forward). Without a cache the input is each row's whole sequence from position 0.
- `rec(name, tensor)` is called at every trace point of `inspector.engine.trace`, once per forward,
  when a recorder is given (the costly attention maps only when `rec.wants` them); a tensor it returns
  replaces the point's value from there on (interventions), cached keys and values included.
- The cache's evicted positions (a KV-cache policy's) are masked in attention like future ones.
- `start=(L, x)` begins at block L with the residual stream x (B, T, D) instead of embedding the ids
  (which still give B and T; `hook_embed` and the blocks before L do not run, nor write their cache
  layers): activation patching reruns only the blocks from its patch on.
A single request (B = 1, no padding) runs the same operations in the same order whatever the batch
machinery, so its results do not depend on it bit for bit.
Attention runs the standard path (full score rows, `inspector.engine.attention`) or, after
`set_attention(model, "tiled")`, FlashAttention's tiles with the online softmax (`inspector.engine.flash`);
the trace points fire the same either way (see `Attention._attend`).
Weight products go through `inspector.engine.linear.project`; a layer's q/k/v (and gate/up) run as one
product when `lay_out_weights` stacked their weights (as `load_model` does), else one by one.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.attention import ForwardPlan, masked_scores, plan_forward, plan_mask, softmax32, windowed
from inspector.engine.config import FULL, SLIDING, ModelConfig
from inspector.engine.flash import TILE, tiled_attend
from inspector.engine.kv_cache import KVCache
from inspector.engine.linear import GATE_UP, QKV, project, stacked_weight
from inspector.engine.rope import apply_rope, rope_cos_sin, rope_inv_freq, signed_sin
from inspector.engine.trace import Recorder, edits, wants


# Queries per attention block. 128 keeps a block's scores of a 512-token prompt (9 heads) at 2.4 MB: under
# the 4 MB mmap threshold (inspector.engine.memory), so they reuse heap memory instead of page-faulting
# fresh mappings.
ATTN_CHUNK = 128
# A low-precision forward of one query block attends in fp32 while its keys and values (KV * S * d
# elements) stay under this: the CPU's bf16 batched products on decode shapes (a few query rows) cost
# twice the fp32 ones plus the upcast (bench/engine.py --profile bf16); past it, the upcast copies dominate.
UPCAST_MAX_KEY_ELEMENTS = 1 << 17
ATTENTION_KINDS = ("standard", "tiled")


def record(rec: Recorder | None, name: str, value: torch.Tensor) -> torch.Tensor:
    """Show `value` to the recorder at trace point `name`; what the model goes on with (a replacement the
    recorder returned, else `value` itself)."""
    if rec is None:
        return value
    out = rec(name, value)
    return value if out is None else out


class NoHooks:
    """Mixed into the model's modules: calling one runs its `forward` directly.

    nn.Module.__call__ also looks for forward/pre hooks, which this engine never uses (it records
    through its recorder argument); that check costs ~5 us a call, over 1 ms of a 30-layer decode step."""

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class Linear(NoHooks, nn.Linear):
    """nn.Linear computed by `project` (the weight product in the form this CPU runs fastest)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.bias)


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


def set_attention(model: nn.Module, kind: str, tile: int = TILE) -> None:
    """Make every attention layer run `kind`: "standard" or "tiled" (ValueError otherwise), the tiled kind
    reading `tile` key positions at a time."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
    if tile < 1:
        raise ValueError(f"tile must be at least 1 key position, got {tile}")
    for module in model.modules():
        if isinstance(module, Attention):
            module.kind, module.tile = kind, tile


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


class Block(NoHooks, nn.Module):
    kind = FULL  # how its attention masks keys (config.layer_type); set per layer by arch.build_block

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config, layer)

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


class Backbone(nn.Module):
    """HF's `model.*`: embeddings, the blocks, the final norm."""

    def __init__(self, config: ModelConfig) -> None:
        from inspector.engine.arch import build_block, norm_class  # the families subclass this module's classes

        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(build_block(config, i) for i in range(config.num_hidden_layers))
        self.norm = norm_class(config)(config.hidden_size, config.rms_norm_eps)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        if not config.tie_word_embeddings:
            self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)
        if config.rope_local_theta is not None:  # sliding layers rotate with their own base
            self.register_buffer("inv_freq_local", rope_inv_freq(config, config.rope_local_theta), persistent=False)
        # Gemma multiplies embeddings by sqrt(D), rounded to the weights' dtype as transformers does
        self.embed_scale = math.sqrt(config.hidden_size) if config.gemma else None
        self.final_softcap = config.final_logit_softcapping

    @property
    def unembed_weight(self) -> torch.Tensor:
        """(V, D): the LM head, which is the embedding matrix when tied."""
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def unembed(self, resid: torch.Tensor) -> torch.Tensor:
        """Final norm then LM head (and the soft-cap): residual (..., D) -> logits (..., V). Also the logit lens."""
        return self.softcap(project(self.model.norm(resid), self.unembed_weight))

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """cap * tanh(logits / cap) for a family with a final soft-cap (Gemma 2), else the logits."""
        cap = self.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, T, D), times the family's scale."""
        x = self.model.embed_tokens(input_ids)
        if self.embed_scale is None:
            return x
        return x * torch.tensor(self.embed_scale).to(x.dtype)  # fp32 first, then the weights dtype

    def layer_inputs(self, plan: ForwardPlan, dtype: torch.dtype) -> dict[str, tuple]:
        """Per layer kind, (cos, sin, plan) of this forward: sliding layers get their RoPE base and window."""
        out = {}
        for kind in {block.kind for block in self.model.layers}:
            inv_freq = self.inv_freq_local if kind == SLIDING and hasattr(self, "inv_freq_local") else self.inv_freq
            cos, sin = rope_cos_sin(inv_freq, plan.positions, dtype)  # (T, d), or (B, T, d) per row
            sin = signed_sin(sin)  # see apply_rope
            if cos.dim() == 3:
                cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, d): broadcast over heads
            window = self.config.sliding_window if kind == SLIDING else None
            out[kind] = (cos, sin, plan if window is None else windowed(plan, window))
        return out

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, rec: Recorder | None = None,
                positions: torch.Tensor | None = None, last_only: bool = False,
                n_layers: int | None = None, start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits (B, T, V), or (B, 1, V) of each row's last real token with `last_only`; only the first
        `n_layers` blocks when given; from block `start[0]` on residual `start[1]` (see the module doc)."""
        B, T = input_ids.shape
        starts = cache.lengths if cache is not None else [0] * B
        plan = plan_forward(B, T, starts, positions, ATTN_CHUNK, input_ids.device)
        if start is None:
            first, x = 0, record(rec, "hook_embed", self.embed(input_ids))  # (B, T, D)
        else:
            first, x = start
        kinds = self.layer_inputs(plan, x.dtype)
        blocks = self.model.layers._modules.values()  # not a slice: a sliced ModuleList is built anew each forward
        for block in itertools.islice(blocks, first, n_layers):
            cos, sin, block_plan = kinds[block.kind]
            x = block(x, cos, sin, cache, block_plan, rec)
        if last_only:
            if plan.counts is None:
                x = x[:, -1:]  # (B, 1, D): prefill needs only the next token's logits
            else:
                last = torch.tensor(plan.counts, device=x.device) - 1  # each row's last real slot
                x = x[torch.arange(B, device=x.device), last][:, None]  # (B, 1, D)
        x = record(rec, "ln_final.hook_normalized", self.model.norm(x))
        logits = project(x, self.unembed_weight)  # (B, T or 1, V)
        if self.final_softcap is not None:
            logits = self.softcap(record(rec, "unembed.hook_logits_raw", logits))
        return record(rec, "unembed.hook_logits", logits)  # (B, T or 1, V)
