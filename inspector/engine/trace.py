"""Trace points: the one table of names (TransformerLens style) and the recorder protocol.

The model calls `rec(name, tensor)` at each point when a recorder is given, once per forward per point,
in the order of `hook_names()`, and does nothing extra when it is None. Points that cost the model extra
work (`COSTLY_HOOKS`: the (B, H, T, S) attention scores and pattern, which a long prompt computes block by
block) fire only when `rec.wants(name)` is true; a recorder without a `wants` method gets every point.

A recorder decides what to keep (usually small `detach().float().cpu()` summaries); it must not modify
the tensor. The model never modifies a tensor after recording it, so a recorder may keep a reference
until the forward ends instead of copying.

Interventions: a recorder may return a tensor of the same shape from `rec(name, value)`; the model then
goes on with that tensor instead of `value` (what it writes to the KV cache included: `attn.hook_rot_k`
and `attn.hook_v` are the cached keys and values). Returning None changes nothing. A recorder that may
replace a point says so with `edits(name)`: the attention scores and pattern are then computed over one
block of all queries and handed over before they are used (a recorder that only reads sees them after).
Trace keys (`blocks.{i}.*`) are a separate namespace from module paths (`model.layers.{i}.*`, used for weights).

The model records only through this argument, never through torch's module hooks: `NoHooks`, mixed into
every module of the model, makes calling a module run its `forward` directly.
"""

from __future__ import annotations

from typing import Protocol

import torch

# Per-forward points; `{i}` is the layer index. Shapes: B batch, T new positions, S cached positions,
# D hidden size, H query heads, KV kv heads, d head_dim, F intermediate size, V vocab.
GLOBAL_HOOKS = (
    "hook_embed",  # (B, T, D) token embeddings
    "ln_final.hook_normalized",  # (B, T, D) after the final RMSNorm
    "unembed.hook_logits",  # (B, T, V) or (B, 1, V) with last_only
)
BLOCK_HOOKS = (
    "hook_resid_pre",  # (B, T, D) residual stream entering the block
    "ln1.hook_normalized",  # (B, T, D) input_layernorm output
    "attn.hook_q",  # (B, H, T, d) queries before RoPE
    "attn.hook_k",  # (B, KV, T, d) new keys before RoPE
    "attn.hook_v",  # (B, KV, T, d) new values
    "attn.hook_rot_q",  # (B, H, T, d) queries after RoPE
    "attn.hook_rot_k",  # (B, KV, T, d) new keys after RoPE (what the KV cache stores)
    "attn.hook_attn_scores",  # (B, H, T, S) scaled scores, -inf where masked (S = key positions read)
    "attn.hook_pattern",  # (B, H, T, S) softmax of the scores (rows sum to 1, 0 where masked)
    "attn.hook_z",  # (B, T, H*d) weighted sum of values, before o_proj
    "hook_attn_out",  # (B, T, D) what attention adds to the residual stream
    "hook_resid_mid",  # (B, T, D) resid_pre + attn_out
    "ln2.hook_normalized",  # (B, T, D) post_attention_layernorm output
    "mlp.hook_pre",  # (B, T, F) gate projection before SiLU
    "mlp.hook_post",  # (B, T, F) silu(gate) * up
    "hook_mlp_out",  # (B, T, D) what the MLP adds
    "hook_resid_post",  # (B, T, D) resid_mid + mlp_out
)


# Points only some families emit (see inspector.engine.arch), each after the base point named.
QK_NORM_HOOKS = (
    "attn.hook_q_normed",  # (B, H, T, d) queries after the q RMSNorm, before RoPE (Qwen3, Qwen3-MoE, Gemma 3 per
    "attn.hook_k_normed",  # (B, KV, T, d) keys after the k RMSNorm, before RoPE      head; OLMoE over all heads)
)  # after attn.hook_v
POST_NORM_HOOKS = {
    "hook_attn_out": "hook_attn_out_raw",  # (B, T, D) o_proj's output before the post-attention norm (Gemma)
    "hook_mlp_out": "hook_mlp_out_raw",  # (B, T, D) down_proj's output before the post-feed-forward norm
}  # each emitted just before its key, which is then the post-normed tensor the residual adds
MLP_HOOKS = ("mlp.hook_pre", "mlp.hook_post")  # a dense MLP's; a mixture of experts emits MOE_HOOKS instead
MOE_HOOKS = (
    "mlp.hook_router_logits",  # (B, T, E) the router's score of each of the E experts, before any softmax
    "mlp.hook_expert_ids",  # (B, T, k) long: the k experts each token goes to, highest weight first
    "mlp.hook_expert_weights",  # (B, T, k) fp32: their weights in the token's mixture (see engine.moe)
)
FINAL_SOFTCAP_HOOKS = (
    "unembed.hook_logits_raw",  # logits before cap * tanh(logits / cap) (Gemma 2); hook_logits after it
)


def block_hooks(qk_norm: bool = False, post_norms: bool = False, moe: bool = False) -> tuple[str, ...]:
    """A block's points, in order of emission, for a family with q/k norms, post-norms and/or a mixture of
    experts as its MLP."""
    out: list[str] = []
    for h in BLOCK_HOOKS:
        if moe and h in MLP_HOOKS:
            if h == MLP_HOOKS[0]:
                out += MOE_HOOKS
            continue
        if post_norms and h in POST_NORM_HOOKS:
            out.append(POST_NORM_HOOKS[h])
        out.append(h)
        if qk_norm and h == "attn.hook_v":
            out += QK_NORM_HOOKS
    return tuple(out)


def hook_names(num_layers: int, qk_norm: bool = False, post_norms: bool = False,
               final_softcap: bool = False, moe: bool = False) -> list[str]:
    """Every trace key a forward emits, in order of emission (a Llama-style block by default)."""
    names = ["hook_embed"]
    for i in range(num_layers):
        names += [f"blocks.{i}.{h}" for h in block_hooks(qk_norm, post_norms, moe)]
    names.append("ln_final.hook_normalized")
    if final_softcap:
        names += FINAL_SOFTCAP_HOOKS
    return names + ["unembed.hook_logits"]


def model_hook_names(config) -> list[str]:
    """`hook_names` of a model of this `ModelConfig` (what its family emits)."""
    return hook_names(config.num_hidden_layers, qk_norm=config.qk_norm, post_norms=config.gemma,
                      final_softcap=config.final_logit_softcapping is not None, moe=config.moe)


# Block points the model computes only for a recorder that asks for them (see the module docstring).
COSTLY_HOOKS = ("attn.hook_attn_scores", "attn.hook_pattern")


class Recorder(Protocol):
    def wants(self, name: str) -> bool: ...

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor | None: ...


def wants(rec: Recorder | None, name: str) -> bool:
    """Whether the model should compute and emit point `name` for `rec` (any point, without `wants`)."""
    if rec is None:
        return False
    ask = getattr(rec, "wants", None)
    return True if ask is None else bool(ask(name))


def edits(rec: Recorder | None, name: str) -> bool:
    """Whether `rec` may replace the tensor at point `name` (a recorder without `edits` only reads)."""
    if rec is None:
        return False
    ask = getattr(rec, "edits", None)
    return False if ask is None else bool(ask(name))


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
