"""Model families: which block, attention, MLP and norm classes a config's layers are built from.

`build_block(config, layer) -> Block` and `norm_class(config)` are what `inspector.engine.model` calls;
one module per family holds what that family adds to the Llama block, built from the shared layers of
`inspector.engine.layers` and `inspector.engine.moe` (module names equal Hugging Face's throughout, so a
checkpoint loads with `strict=True`). The architectures import the layers, never the model:
- llama, qwen2: the Llama block itself (Qwen2: biases on q/k/v, from the config).
- mistral: the Llama block; every layer attends over a sliding window (`config.layer_types`).
- qwen3: RMSNorm over each head's queries and keys before RoPE (`q_norm`, `k_norm`).
- phi3: q/k/v in one `qkv_proj` matrix and gate/up in one `gate_up_proj`, as its checkpoints store them.
- gemma2: (1 + w) RMSNorms, post-norms after attention and MLP, GELU-tanh, scores scaled by
  query_pre_attn_scalar, attention scores soft-capped, local (sliding) and global layers alternating.
- gemma3_text: Gemma 2 without the soft-caps, plus (1 + w) q/k norms and a RoPE base of its own for the
  sliding layers (5 sliding : 1 global).
Mixtures of experts (`inspector.engine.moe` as the MLP of every layer):
- mixtral: the Mistral block; softmax over the experts, top-k, weights renormalised.
- qwen3_moe: the Qwen3 block; softmax, top-k, renormalised when `norm_topk_prob`.
- olmoe: q/k RMSNorms over all heads at once; softmax, top-k, renormalised when `norm_topk_prob`.
- granitemoe: Granite's embedding, attention and residual multipliers and logit scaling; top-k logits, then
  their softmax.
`FAMILY_FEATURES[model_type]` names those additions for the views and the CLI.
"""

from __future__ import annotations

from inspector.engine.arch import gemma2, gemma3, granitemoe, llama, mistral, mixtral, olmoe, phi3, qwen3, qwen3_moe
from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block, GemmaRMSNorm, RMSNorm

_FAMILIES = {"llama": llama, "qwen2": llama, "mistral": mistral, "qwen3": qwen3, "phi3": phi3,
             "gemma2": gemma2, "gemma3_text": gemma3, "mixtral": mixtral, "qwen3_moe": qwen3_moe, "olmoe": olmoe,
             "granitemoe": granitemoe}
FAMILY_FEATURES = {name: module.FEATURES for name, module in _FAMILIES.items()}


def build_block(config: ModelConfig, layer: int) -> Block:
    """Layer `layer` of a model of this config, its `kind` set from `config.layer_type(layer)`."""
    block = _FAMILIES[config.model_type].build_block(config, layer)
    block.kind = config.layer_type(layer)
    return block


def norm_class(config: ModelConfig) -> type:
    """The family's RMSNorm: Gemma's multiplies by (1 + w), the others by w."""
    return GemmaRMSNorm if config.gemma else RMSNorm
