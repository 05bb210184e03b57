"""Model and sampling configuration.

`ModelConfig` fields are the Hugging Face config.json keys of the Llama family (Llama, SmolLM, Qwen2).
`ModelConfig.from_hf` reads those keys and raises `UnsupportedConfigError` (naming the key and value)
for anything that would change the math in a way the engine does not implement — it never ignores one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inspector.errors import UnsupportedConfigError  # re-exported for callers of from_hf
from inspector.validate import SAMPLING

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")




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
            "architectures": ["Qwen2ForCausalLM" if self.model_type == "qwen2" else "LlamaForCausalLM"],
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
            "hidden_act": "silu",
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.attention_bias
            out["mlp_bias"] = False
        return out

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], name: str = "model") -> "ModelConfig":
        """Build from a parsed config.json; raise UnsupportedConfigError on math we don't implement."""

        def reject(key: str, value: Any, why: str) -> None:
            raise UnsupportedConfigError(f"unsupported config: {key}={value!r} ({why})")

        model_type = cfg.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            reject("model_type", model_type, f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
        if act != "silu":
            reject("hidden_act", act, "only silu (SwiGLU) is implemented")
        if cfg.get("mlp_bias"):
            reject("mlp_bias", cfg["mlp_bias"], "MLP biases are not implemented")
        if model_type == "qwen2" and cfg.get("use_sliding_window"):
            reject("use_sliding_window", cfg["use_sliding_window"], "sliding-window attention is not implemented")
        for key in ("pretraining_tp",):
            if cfg.get(key, 1) != 1:
                reject(key, cfg[key], "only 1 is implemented")

        # transformers >= 5 nests rope settings in `rope_parameters`; older configs use top-level keys.
        rope_params = dict(cfg.get("rope_parameters") or {})
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
        )


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
