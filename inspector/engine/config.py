"""Model and sampling configuration.

`ModelConfig` fields are Hugging Face config.json keys: the Llama family's (Llama, SmolLM, Qwen2) and the
keys of the other families the engine implements (Qwen3, Mistral, Phi-3, Gemma 2, Gemma 3 text, and the
mixtures of experts Mixtral, Qwen3-MoE, OLMoE, Granite-MoE; see `inspector.engine.arch` for what each adds).
`ModelConfig.from_hf` reads those keys and raises `UnsupportedConfigError` (naming the key, its value and
what is supported) for anything that would change the math in a way the engine does not implement — it
never ignores one.

Layer kinds: `layer_types[i]` is "full_attention" (causal over every earlier position) or
"sliding_attention" (only the `sliding_window` latest positions, the query's own included, as
transformers' sliding-window mask). Sliding layers rotate with `rope_local_theta` when it is set
(Gemma 3), else with `rope_theta`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from inspector.errors import UnsupportedConfigError  # re-exported for callers of from_hf
from inspector.validate import SAMPLING

MOE_TYPES = ("mixtral", "qwen3_moe", "olmoe", "granitemoe")  # a sparse mixture of experts in every layer's MLP
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3_text", *MOE_TYPES)
FULL, SLIDING = "full_attention", "sliding_attention"
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")  # the gated MLP's activation on the gate
GEMMA_TYPES = ("gemma2", "gemma3_text")  # (1 + w) norms, sandwich norms, embeddings scaled by sqrt(D)
QK_NORM_TYPES = ("qwen3", "gemma3_text", "qwen3_moe", "olmoe")  # RMSNorm over queries and keys before RoPE
SLIDING_TYPES = ("mistral", "phi3", "mixtral")  # every layer slides when the config sets a window
# The key naming the expert count: Qwen3-MoE and OLMoE write num_experts, Mixtral and Granite num_local_experts.
EXPERTS_KEY = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts", "olmoe": "num_experts",
               "granitemoe": "num_local_experts"}
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                  "mistral": "MistralForCausalLM", "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
                  "gemma3_text": "Gemma3ForCausalLM", "mixtral": "MixtralForCausalLM",
                  "qwen3_moe": "Qwen3MoeForCausalLM", "olmoe": "OlmoeForCausalLM",
                  "granitemoe": "GraniteMoeForCausalLM"}


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # HF key when present (Qwen, newer Llama); else hidden_size // num_attention_heads
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # None or {"rope_type": "llama3", ...}
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Llama: bias on q, k, v and o projections
    model_type: str = "llama"  # "qwen2": bias on q, k, v only
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    name: str = field(default="model", compare=False)
    hidden_act: str = "silu"  # one of ACTIVATIONS (Gemma: gelu_pytorch_tanh)
    sliding_window: int | None = None  # keys a sliding layer's query sees, itself included
    layer_types: tuple[str, ...] = ()  # FULL or SLIDING per layer; () means every layer FULL
    rope_local_theta: float | None = None  # RoPE base of sliding layers (Gemma 3); None: rope_theta
    query_pre_attn_scalar: float | None = None  # scores scaled by its -1/2 power (Gemma); None: head_dim
    attn_logit_softcapping: float | None = None  # scores -> cap * tanh(scores / cap) before the mask (Gemma 2)
    final_logit_softcapping: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)
    num_experts: int = 0  # experts per MoE layer (HF: num_experts or num_local_experts); 0 for a dense model
    num_experts_per_tok: int = 0  # top-k: experts each token goes to
    moe_intermediate_size: int | None = None  # an expert's FFN width (Qwen3-MoE); None: intermediate_size
    norm_topk_prob: bool = False  # renormalise the top-k weights to sum to 1 (Qwen3-MoE, OLMoE; Mixtral always)
    embedding_multiplier: float = 1.0  # Granite: embeddings times this
    residual_multiplier: float = 1.0  # Granite: attention and MLP outputs times this before the residual adds
    attention_multiplier: float | None = None  # Granite: the score scale itself (None: see attn_scale)
    logits_scaling: float = 1.0  # Granite: logits divided by this

    def layer_type(self, layer: int) -> str:
        """FULL or SLIDING: how layer `layer` masks its keys."""
        return self.layer_types[layer] if self.layer_types else FULL

    @property
    def gemma(self) -> bool:
        """Gemma norms: (1 + w) RMSNorm, post-norms around attention and MLP, embeddings times sqrt(D)."""
        return self.model_type in GEMMA_TYPES

    @property
    def qk_norm(self) -> bool:
        return self.model_type in QK_NORM_TYPES

    @property
    def moe(self) -> bool:
        """Every layer's MLP is a sparse mixture of `num_experts` experts, `num_experts_per_tok` per token."""
        return self.model_type in MOE_TYPES

    @property
    def expert_intermediate_size(self) -> int:
        """One expert's FFN width."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def fused(self) -> bool:
        """Phi-3: q/k/v in one `qkv_proj` matrix and gate/up in one `gate_up_proj` in the checkpoint."""
        return self.model_type == "phi3"

    @property
    def attn_scale(self) -> float:
        """What q.k is multiplied by before the softmax."""
        if self.attention_multiplier is not None:
            return self.attention_multiplier
        return (self.query_pre_attn_scalar if self.query_pre_attn_scalar is not None else self.head_dim) ** -0.5

    @property
    def n_rep(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias or self.model_type == "qwen2"

    @property
    def o_bias(self) -> bool:
        return self.attention_bias and self.model_type == "llama"

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)

    def to_hf(self) -> dict[str, Any]:
        """The config.json dict (HF key names) that `from_hf` reads back to an equal config."""
        out = {
            "architectures": [_ARCHITECTURES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": self.hidden_act,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.attention_bias
            out["mlp_bias"] = False
        if self.model_type in SLIDING_TYPES or self.layer_types:
            out["sliding_window"] = self.sliding_window
        if self.layer_types:
            out["layer_types"] = list(self.layer_types)
        if self.model_type == "qwen3":
            out["use_sliding_window"] = False
        if self.gemma:
            out["hidden_activation"] = out.pop("hidden_act")
            q = self.query_pre_attn_scalar  # transformers' Gemma configs type it int when whole
            out["query_pre_attn_scalar"] = int(q) if q is not None and float(q).is_integer() else q
            out["attn_logit_softcapping"] = self.attn_logit_softcapping
            out["final_logit_softcapping"] = self.final_logit_softcapping
        if self.rope_local_theta is not None:
            out["rope_local_base_freq"] = self.rope_local_theta
        if self.moe:
            out[EXPERTS_KEY[self.model_type]] = self.num_experts
            out["num_experts_per_tok"] = self.num_experts_per_tok
        if self.model_type in ("qwen3_moe", "olmoe"):
            out["norm_topk_prob"] = self.norm_topk_prob
        if self.model_type == "qwen3_moe":
            out.update(moe_intermediate_size=self.moe_intermediate_size, use_sliding_window=False,
                       decoder_sparse_step=1, mlp_only_layers=[])
        if self.model_type == "granitemoe":
            out.update(embedding_multiplier=self.embedding_multiplier, residual_multiplier=self.residual_multiplier,
                       attention_multiplier=self.attention_multiplier, logits_scaling=self.logits_scaling)
        return out

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], name: str = "model") -> "ModelConfig":
        """Build from a parsed config.json; raise UnsupportedConfigError on math we don't implement."""

        def reject(key: str, value: Any, why: str) -> None:
            raise UnsupportedConfigError(f"unsupported config: {key}={value!r} ({why})")

        model_type = cfg.get("model_type", "llama")
        if model_type == "gemma3" and isinstance(cfg.get("text_config"), dict):
            reject("model_type", model_type, "the multimodal Gemma 3 is not implemented; its text model "
                   "(model_type gemma3_text) is")
        if model_type not in SUPPORTED_MODEL_TYPES:
            reject("model_type", model_type, f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        gemma = model_type in GEMMA_TYPES
        # Gemma configs name the activation hidden_activation (and may carry a stale hidden_act).
        if gemma:
            act = cfg.get("hidden_activation") or cfg.get("hidden_act", "silu")
        else:
            act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
        if act not in ACTIVATIONS:
            reject("hidden_act", act, f"supported: {', '.join(ACTIVATIONS)}")
        if cfg.get("mlp_bias"):
            reject("mlp_bias", cfg["mlp_bias"], "MLP biases are not implemented")
        if model_type == "qwen2" and cfg.get("use_sliding_window"):
            reject("use_sliding_window", cfg["use_sliding_window"], "Qwen2's sliding-window layers are not implemented")
        if model_type in ("qwen3", "qwen3_moe") and cfg.get("use_sliding_window"):
            reject("use_sliding_window", cfg["use_sliding_window"], "Qwen3's sliding-window layers are not implemented")
        if gemma and cfg.get("use_bidirectional_attention"):
            reject("use_bidirectional_attention", cfg["use_bidirectional_attention"], "only causal attention")
        if model_type not in ("llama", "qwen2") and cfg.get("attention_bias"):
            reject("attention_bias", cfg["attention_bias"], f"{model_type} attention biases are not implemented")
        for key in ("pretraining_tp",):
            if cfg.get(key, 1) != 1:
                reject(key, cfg[key], "only 1 is implemented")

        # transformers >= 5 nests rope settings in `rope_parameters`; older configs use top-level keys.
        # Gemma 3 nests them once more, per layer kind.
        rope_params = dict(cfg.get("rope_parameters") or {})
        rope_local_theta = cfg.get("rope_local_base_freq") if model_type == "gemma3_text" else None
        if FULL in rope_params or SLIDING in rope_params:
            local = dict(rope_params.get(SLIDING) or {})
            rope_params = dict(rope_params.get(FULL) or {})
            if local.get("rope_type", "default") != "default":
                reject("rope_parameters.sliding_attention.rope_type", local["rope_type"], "supported: default")
            if "rope_theta" in local and model_type == "gemma3_text":
                rope_local_theta = local["rope_theta"]
        if rope_params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) != 1.0:
            reject("partial_rotary_factor", rope_params.get("partial_rotary_factor", cfg.get("partial_rotary_factor")),
                   "only 1.0 (RoPE over the whole head) is implemented")
        rope_theta = float(cfg.get("rope_theta", rope_params.get("rope_theta", 10000.0)))
        scaling = cfg.get("rope_scaling")
        if scaling is None and rope_params.get("rope_type", "default") != "default":
            scaling = rope_params
        if scaling is not None:
            scaling = dict(scaling)
            rope_type = scaling.get("rope_type", scaling.get("type", "default"))
            if rope_type == "default":
                scaling = None
            elif rope_type == "llama3":
                for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                    if k not in scaling:
                        reject(f"rope_scaling.{k}", None, "required for rope_type llama3")
                scaling = {
                    "rope_type": "llama3",
                    "factor": float(scaling["factor"]),
                    "low_freq_factor": float(scaling["low_freq_factor"]),
                    "high_freq_factor": float(scaling["high_freq_factor"]),
                    "original_max_position_embeddings": int(scaling["original_max_position_embeddings"]),
                }
            else:
                reject("rope_scaling.rope_type", rope_type, "supported: default, llama3")

        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        if heads % kv_heads:
            reject("num_key_value_heads", kv_heads, f"must divide num_attention_heads={heads}")
        hidden = int(cfg["hidden_size"])
        head_dim = cfg.get("head_dim") or hidden // heads
        if head_dim % 2:
            reject("head_dim", head_dim, "RoPE needs an even head_dim")
        layers = int(cfg["num_hidden_layers"])
        window = cfg.get("sliding_window")
        if window is not None and (not isinstance(window, int) or window < 1):
            reject("sliding_window", window, "a positive whole number or null")
        layer_types: tuple[str, ...] = ()
        if model_type in SLIDING_TYPES:  # every layer slides when a window is set
            layer_types = (SLIDING,) * layers if window is not None else ()
        elif gemma:
            given = cfg.get("layer_types")
            if given is None:  # older configs: a period (Gemma 3) or alternation from the first layer (Gemma 2)
                period = int(cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6 if model_type == "gemma3_text" else 2)))
                given = [FULL if (i + 1) % period == 0 else SLIDING for i in range(layers)] if model_type == "gemma3_text" \
                    else [SLIDING if i % 2 == 0 else FULL for i in range(layers)]
            layer_types = tuple(given)
        elif cfg.get("layer_types") is not None and any(t != FULL for t in cfg["layer_types"]):
            reject("layer_types", cfg["layer_types"], f"{model_type} has only full_attention layers here")
        if layer_types:
            if len(layer_types) != layers or any(t not in (FULL, SLIDING) for t in layer_types):
                reject("layer_types", list(layer_types), f"{layers} entries, each {FULL} or {SLIDING}")
            if SLIDING in layer_types and window is None:
                reject("sliding_window", window, "sliding_attention layers need a window")
            if all(t == FULL for t in layer_types):
                layer_types = ()
        if not layer_types and model_type not in SLIDING_TYPES and not gemma:
            window = None  # a window no layer uses

        def opt_float(key: str) -> float | None:
            return None if cfg.get(key) is None else float(cfg[key])

        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=int(head_dim),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=rope_theta,
            rope_scaling=scaling,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", False)) if model_type == "llama" else False,
            model_type=model_type,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_id=cfg.get("eos_token_id"),
            name=name,
            hidden_act=act,
            sliding_window=window,
            layer_types=layer_types,
            rope_local_theta=None if rope_local_theta is None else float(rope_local_theta),
            query_pre_attn_scalar=opt_float("query_pre_attn_scalar") if gemma else None,
            attn_logit_softcapping=opt_float("attn_logit_softcapping") if gemma else None,
            final_logit_softcapping=opt_float("final_logit_softcapping") if gemma else None,
            **_moe_fields(cfg, model_type, hidden // heads, head_dim, reject),
        )


def _moe_fields(cfg: dict[str, Any], model_type: str, default_head_dim: int, head_dim: int,
                reject: Any) -> dict[str, Any]:
    """The mixture-of-experts and Granite fields of `from_hf` (empty for a dense family); `reject` raises on
    keys whose math the engine does not implement."""
    if model_type not in MOE_TYPES:
        return {}
    key = EXPERTS_KEY[model_type]  # the family's own name for it; the other one is read too (transformers maps both)
    if cfg.get(key) is None:
        key = "num_experts" if key == "num_local_experts" else "num_local_experts"
        key = key if cfg.get(key) is not None else EXPERTS_KEY[model_type]
    experts, k = cfg.get(key), cfg.get("num_experts_per_tok")
    for name, value in ((key, experts), ("num_experts_per_tok", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            reject(name, value, "a whole number of experts, at least 1, required for a mixture of experts")
    if k > experts:
        reject("num_experts_per_tok", k, f"top-k cannot exceed the {experts} experts ({key})")
    if model_type == "qwen3_moe":
        if cfg.get("decoder_sparse_step", 1) != 1:
            reject("decoder_sparse_step", cfg["decoder_sparse_step"], "dense layers between the MoE ones are not "
                   "implemented: only 1 (every layer MoE)")
        if cfg.get("mlp_only_layers"):
            reject("mlp_only_layers", cfg["mlp_only_layers"], "dense layers among the MoE ones are not implemented")
    if model_type == "olmoe":
        if cfg.get("clip_qkv") is not None:
            reject("clip_qkv", cfg["clip_qkv"], "clipping q/k/v is not implemented: only null")
        if head_dim != default_head_dim:  # its q/k norms span hidden_size: heads x (hidden // heads)
            reject("head_dim", head_dim,
                   f"OLMoE's q/k norms need hidden_size // num_attention_heads = {default_head_dim}")
    out: dict[str, Any] = {"num_experts": experts, "num_experts_per_tok": k,
                           "norm_topk_prob": bool(cfg.get("norm_topk_prob", False))}
    if model_type == "qwen3_moe":
        out["moe_intermediate_size"] = int(cfg.get("moe_intermediate_size", cfg["intermediate_size"]))
    if model_type == "granitemoe":  # transformers' defaults: 1.0 each, so scores are q.k * 1.0 unless set
        for name in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            value = cfg.get(name, 1.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                reject(name, value, "a number")
            out[name] = float(value)
        if out["logits_scaling"] == 0:
            reject("logits_scaling", 0, "logits are divided by it: not 0")
    return out


MIN_TEMPERATURE = SAMPLING[0].least_nonzero  # 0 (greedy) or at least this: see inspector.validate


@dataclass(frozen=True)
class SamplingParams:
    """Temperature 0 means greedy (argmax). top_k 0 and top_p 1.0 and min_p 0.0 mean "off"."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0

    def validate(self) -> None:
        """Check every field against its range (`inspector.validate.SAMPLING`); NumberError (an InputError and a
        ValueError) naming the field, its range and the value otherwise."""
        for bound, value in zip(SAMPLING, (self.temperature, self.top_k, self.top_p, self.min_p, self.seed)):
            bound.parse(value)
