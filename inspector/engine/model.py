"""The decoder in plain PyTorch, instrumented with trace points: embeddings, the blocks, the final norm and
the LM head.

Read the forward top-down: `Transformer.forward` here (embed, the blocks, final norm, LM head), then
`Block.forward` in `inspector.engine.layers` (the residual stream through norm, attention and MLP) and the
layers below it in that file, in the order they run. The blocks come from `inspector.engine.arch` (its
`build_block` picks a layer's parts for the config's family) built from those layers: this module imports
the architectures, never the other way round. The model itself adds only what sits outside the
blocks: Gemma's embedding scale, a second RoPE base for sliding layers, each layer kind's mask
(`scores.windowed`), the final logit soft-cap, and Granite's embedding multiplier and logit scaling.

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
Attention runs the standard path (full score rows, `inspector.engine.scores`) or, after
`set_attention(model, "tiled")`, FlashAttention's tiles with the online softmax (`inspector.engine.flash`);
the trace points fire the same either way (see `Attention._attend`).
Weight products go through `inspector.engine.linear.project`; a layer's q/k/v (and gate/up) run as one
product when `lay_out_weights` stacked their weights (as `load_model` does), else one by one.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from inspector.engine.arch import build_block, norm_class
from inspector.engine.config import SLIDING, ModelConfig
from inspector.engine.flash import TILE
from inspector.engine.kv_cache import KVCache
from inspector.engine.layers import ATTENTION_KINDS, Attention, rope_cos_sin, rope_inv_freq, signed_sin
from inspector.engine.linear import Linear, project
from inspector.engine.scores import ForwardPlan, plan_forward, windowed
from inspector.engine.trace import Recorder, record


# Queries per attention block. 128 keeps a block's scores of a 512-token prompt (9 heads) at 2.4 MB: under
# the 4 MB mmap threshold (inspector.engine.memory), so they reuse heap memory instead of page-faulting
# fresh mappings.
ATTN_CHUNK = 128


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


class Backbone(nn.Module):
    """HF's `model.*`: embeddings, the blocks, the final norm."""

    def __init__(self, config: ModelConfig) -> None:
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
        self.embed_multiplier = config.embedding_multiplier  # Granite's; 1.0 elsewhere
        self.final_softcap = config.final_logit_softcapping
        self.logits_scaling = config.logits_scaling  # Granite divides the logits by it; 1.0 elsewhere

    @property
    def unembed_weight(self) -> torch.Tensor:
        """(V, D): the LM head, which is the embedding matrix when tied."""
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def unembed(self, resid: torch.Tensor) -> torch.Tensor:
        """Final norm then LM head (and the soft-cap or scaling): residual (..., D) -> logits (..., V). Also
        the logit lens."""
        return self.scale_logits(self.softcap(project(self.model.norm(resid), self.unembed_weight)))

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """cap * tanh(logits / cap) for a family with a final soft-cap (Gemma 2), else the logits."""
        cap = self.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def scale_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """logits / logits_scaling (Granite), else the logits."""
        return logits if self.logits_scaling == 1.0 else logits / self.logits_scaling

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, T, D), times the family's scale."""
        x = self.model.embed_tokens(input_ids)
        if self.embed_scale is not None:
            x = x * torch.tensor(self.embed_scale).to(x.dtype)  # fp32 first, then the weights dtype (Gemma)
        return x if self.embed_multiplier == 1.0 else x * self.embed_multiplier

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
        return record(rec, "unembed.hook_logits", self.scale_logits(logits))  # (B, T or 1, V)
