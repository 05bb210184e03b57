"""Memory calculator: parameters, weight bytes, KV-cache bytes and how many requests fit, from a config alone.

Exact integer counts from a `ModelConfig`; no weights are read.

- `tensors(cfg)`: every weight tensor the engine's `Transformer` holds, read off that model built from
  `cfg` on torch's meta device (shapes only, no memory; one layer built, its tensors repeated for every
  layer, as each layer of the implemented families holds the same ones): HF name, shape and group (as
  in `inspector.models.inventory.GROUPS`). A tied LM head has no tensor of its own. `count_params` sums them.
- `weight_bytes(cfg, dtype)`: fp32 4 bytes, bf16/fp16 2 bytes per weight. int8 and int4 are weight-only
  and group-wise like GGUF's Q8_0/Q4_0 blocks: each run of 32 weights along a matrix row shares one fp16
  scale, so 34 bytes per 32 weights (8.5 bits) and 18 bytes per 32 (4.5 bits). Every matrix is quantized,
  the embedding and LM head too; 1-D tensors (norm weights, biases) stay 16-bit.
- `kv_bytes_per_token(cfg, kv_dtype)`: the engine's formula (`inspector.engine.kv_cache.kv_bytes`),
  2 (K and V) × layers × kv_heads × head_dim × bytes per element. `kv_bytes(...)` multiplies by
  context × batch: a full cache, every position of every request kept (no sliding window, no rounding up
  to whole pages). Scales of an 8-bit KV cache are not counted. `windowed_kv_bytes(...)` is the exact size
  of a cache that keeps, in each sliding-window layer, only the last `sliding_window` positions (Mistral's
  rolling buffer; Gemma 2/3's local layers, 1 in 2 and 5 in 6): per layer min(context, window) positions
  there, the whole context in the global layers; None for a model without sliding layers. The engine
  itself keeps a full cache, so `kv_bytes` is what it holds.
- Mixtures of experts: memory holds every expert, so `count_params` and `weight_bytes` count them all;
  what one token or one step uses is `inspector.serving.experts`'.
- `with_full_mha(cfg)`: the same model with kv_heads = attention heads (larger k/v projections too), the
  baseline that grouped-query attention saves against.
- `requests_that_fit(...)`: ⌊(memory − weights) / (kv_bytes_per_token × context)⌋. Weights and KV only:
  activations, the CUDA context and allocator fragmentation are not counted.

Configs: `resolve_config(name_or_path)` reads one of the shipped configurations (model_configs.json, each
with its sources) or a local config.json / HF model directory, and builds the engine's `ModelConfig` with
`ModelConfig.from_hf` from the keys that set tensor shapes (and the layer kinds, which a Gemma config needs
to be valid). from_hf refuses keys whose math the engine does not implement (a rope scaling type, an
activation); those change what is computed, not what is stored, so they are not passed. Every family the
engine implements (Llama, Qwen2, Qwen3, Mistral, Phi-3, Gemma 2, Gemma 3 text, Mixtral, Qwen3-MoE, OLMoE,
Granite-MoE) is built as itself, so its own tensors are counted (q/k norms, Gemma's post-norms, Phi-3's
fused matrices, routers and every expert). A key that would change the
count itself (mlp_bias, another architecture) is refused: the engine cannot build that model, so nothing is
guessed.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from inspector.engine import kv_cache
from inspector.engine.config import SUPPORTED_MODEL_TYPES, ModelConfig
from inspector.engine.model import Transformer
from inspector.errors import InputError, ModelLoadError, UnsupportedConfigError
from inspector.models.inventory import group_of

# model_type -> the engine family whose tensor layout it has: each implemented family is its own.
LAYOUTS = {t: t for t in SUPPORTED_MODEL_TYPES}
# The config.json keys that set tensor shapes: all the calculator passes to from_hf.
SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings",
              "attention_bias", "mlp_bias", "sliding_window", "layer_types", "num_local_experts", "num_experts",
              "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers")
REQUIRED_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
GROUP_SIZE = 32  # weights per fp16 scale in int8/int4 (GGUF Q8_0/Q4_0 blocks)


@dataclass(frozen=True)
class Precision:
    """Storage of one weight: `bits` each, plus one fp16 scale per `group` weights of a matrix row (0 = none)."""

    name: str
    bits: int
    group: int = 0

    def matrix_bytes(self, rows: int, cols: int) -> int:
        scales = 2 * math.ceil(cols / self.group) if self.group else 0
        return rows * (math.ceil(cols * self.bits / 8) + scales)

    def vector_bytes(self, n: int) -> int:
        return 2 * n if self.group else n * self.bits // 8  # quantized formats keep 1-D tensors in fp16


WEIGHT_DTYPES = {
    "fp32": Precision("fp32", 32), "bf16": Precision("bf16", 16), "fp16": Precision("fp16", 16),
    "int8": Precision("int8", 8, GROUP_SIZE), "int4": Precision("int4", 4, GROUP_SIZE),
}
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}  # bytes per cached element
ALIASES = {"float32": "fp32", "f32": "fp32", "bfloat16": "bf16", "float16": "fp16", "f16": "fp16",
           "half": "fp16", "float8": "fp8"}


def dtype_name(name: str, kv: bool = False) -> str:
    """Canonical name of a weight (or KV) dtype, e.g. "bfloat16" -> "bf16"; InputError if unknown."""
    known = KV_DTYPES if kv else WEIGHT_DTYPES
    key = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in known:
        what = "KV dtype" if kv else "dtype"
        raise InputError(f"unknown {what} {name!r}; choose one of {', '.join(known)}")
    return key


def default_kv_dtype(dtype: str) -> str:
    """The cache keeps the weights' float type; weight-only int8/int4 keep activations and KV in bf16."""
    return dtype if dtype in KV_DTYPES and WEIGHT_DTYPES[dtype].group == 0 else "bf16"


@dataclass(frozen=True)
class Tensor:
    name: str  # HF name, e.g. model.layers.3.self_attn.q_proj.weight
    shape: tuple[int, ...]
    group: str  # as in inspector.models.inventory.GROUPS

    @property
    def params(self) -> int:
        return math.prod(self.shape)


def tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    """Every weight tensor of the engine's Transformer for `cfg`, in its order (a tied LM head has none)."""
    # rope_scaling and the token ids change no tensor; dropping them keeps the config hashable for the cache
    return _meta_tensors(replace(cfg, rope_scaling=None, bos_token_id=None, eos_token_id=None))


@functools.lru_cache(maxsize=64)
def _meta_tensors(cfg: ModelConfig) -> tuple[Tensor, ...]:
    # Every layer of an implemented family holds the same tensors (layer kinds differ in their mask only), so
    # one layer is built and its tensors repeated: a 48-layer model of 128 experts builds 384 expert modules,
    # not 18,432.
    with torch.device("meta"):  # shapes without storage: a 70B model costs nothing to build
        model = Transformer(replace(cfg, num_hidden_layers=1))
    out: list[Tensor] = []
    layer0 = [(name, tuple(p.shape)) for name, p in model.named_parameters() if name.startswith("model.layers.0.")]
    for name, p in model.named_parameters():
        if name == layer0[0][0]:
            out += [Tensor(n.replace(".layers.0.", f".layers.{i}.", 1), s, group_of(n))
                    for i in range(cfg.num_hidden_layers) for n, s in layer0]
        elif not name.startswith("model.layers.0."):
            out.append(Tensor(name, tuple(p.shape), group_of(name)))
    return tuple(out)


def tensor_bytes(t: Tensor, dtype: str) -> int:
    """Bytes of `t` stored in `dtype`."""
    prec = WEIGHT_DTYPES[dtype_name(dtype)]
    if len(t.shape) == 1:
        return prec.vector_bytes(t.shape[0])
    return prec.matrix_bytes(math.prod(t.shape[:-1]), t.shape[-1])  # (E, out, in) stacked experts: E*out rows


def count_params(cfg: ModelConfig) -> int:
    """Parameters of the model: the sum over `tensors(cfg)` (a tied LM head counts once, as the embedding)."""
    return sum(t.params for t in tensors(cfg))


def weight_bytes(cfg: ModelConfig, dtype: str) -> int:
    """Bytes of all weights stored in `dtype` (see the module docstring for int8/int4)."""
    return sum(tensor_bytes(t, dtype) for t in tensors(cfg))


def param_groups(cfg: ModelConfig, dtype: str) -> dict[str, tuple[int, int]]:
    """group -> (params, bytes), in tensor order."""
    out: dict[str, tuple[int, int]] = {}
    for t in tensors(cfg):
        p, b = out.get(t.group, (0, 0))
        out[t.group] = (p + t.params, b + tensor_bytes(t, dtype))
    return out


def kv_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> int:
    """2 (K and V) × layers × kv_heads × head_dim × bytes per element (`inspector.engine.kv_cache.kv_bytes`)."""
    return kv_cache.kv_bytes(cfg, 1, KV_DTYPES[dtype_name(kv_dtype, kv=True)])


def positive(value: Any, what: str) -> int:
    """`value` as an int > 0, else InputError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return value


def kv_bytes(cfg: ModelConfig, context: int, batch: int, kv_dtype: str = "bf16") -> int:
    """A full cache of `batch` requests of `context` tokens each."""
    return kv_bytes_per_token(cfg, kv_dtype) * positive(context, "context") * positive(batch, "batch")


def windowed_kv_bytes(cfg: ModelConfig, context: int, batch: int, kv_dtype: str = "bf16") -> int | None:
    """A cache of `batch` requests of `context` tokens keeping only the window in sliding layers (None: none)."""
    kinds = [cfg.layer_type(i) for i in range(cfg.num_hidden_layers)]
    if cfg.sliding_window is None or all(k == "full_attention" for k in kinds):
        return None
    per_layer_token = kv_bytes_per_token(cfg, kv_dtype) // cfg.num_hidden_layers  # K and V of one layer
    context, batch = positive(context, "context"), positive(batch, "batch")
    kept = sum(context if k == "full_attention" else min(context, cfg.sliding_window) for k in kinds)
    return per_layer_token * kept * batch


def with_full_mha(cfg: ModelConfig) -> ModelConfig:
    """The same model with one KV head per attention head (no grouped-query sharing)."""
    return replace(cfg, num_key_value_heads=cfg.num_attention_heads)


def requests_that_fit(memory_bytes: int, weights: int, kv_per_token: int, context: int) -> int:
    """How many requests of `context` tokens fit in `memory_bytes` after the weights (0 if none)."""
    free = memory_bytes - weights
    return max(0, free // (kv_per_token * positive(context, "context")))


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes: int
    fits_requests: int | None = None  # requests of this context that fit in the memory asked about (None: not asked)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    def to_json(self) -> dict[str, int | None]:
        return {"params": self.params, "weight_bytes": self.weight_bytes,
                "kv_bytes_per_token": self.kv_bytes_per_token, "kv_bytes": self.kv_bytes,
                "total_bytes": self.total_bytes, "fits_requests": self.fits_requests}


def estimate(cfg: ModelConfig, context: int, batch: int = 1, dtype: str = "bf16", kv_dtype: str | None = None,
             memory_bytes: int | None = None) -> MemoryEstimate:
    """Weights in `dtype` plus a full KV cache (default dtype: `default_kv_dtype`) for context × batch."""
    dtype = dtype_name(dtype)
    kv_dtype = dtype_name(kv_dtype, kv=True) if kv_dtype is not None else default_kv_dtype(dtype)
    weights, per_token = weight_bytes(cfg, dtype), kv_bytes_per_token(cfg, kv_dtype)
    fits = None if memory_bytes is None else requests_that_fit(memory_bytes, weights, per_token, context)
    return MemoryEstimate(count_params(cfg), weights, per_token, kv_bytes(cfg, context, batch, kv_dtype), fits)


# ---- configurations: shipped ones and local files ----------------------------------------------------------

@dataclass(frozen=True)
class ShippedConfig:
    repo_id: str
    config: dict[str, Any]  # config.json keys
    config_sources: tuple[str, ...]
    published_params: int
    published_label: str
    published_source: str
    notes: str
    published_active: int | None = None  # a mixture of experts' published active parameters per token


@dataclass(frozen=True)
class ResolvedConfig:
    name: str  # the shipped repo id, or the path given
    source: str  # where the values came from: the first config source, or the file read
    config: ModelConfig
    raw: dict[str, Any]  # the config.json as read
    shipped: ShippedConfig | None

    @property
    def torch_dtype(self) -> str | None:
        """The checkpoint's dtype as a canonical name, None when absent or not one the calculator knows."""
        value = str(self.raw.get("torch_dtype") or self.raw.get("dtype") or "").lower()  # transformers 5: "dtype"
        value = ALIASES.get(value, value)
        return value if value in WEIGHT_DTYPES else None

    @property
    def layout_note(self) -> str | None:
        """One line when the engine builds this model as another family (same tensors), else None."""
        model_type = self.raw.get("model_type", "llama")
        built = LAYOUTS.get(model_type, model_type)
        return None if built == model_type else (f"model_type {model_type} is counted as the engine's {built} "
                                                 f"model (the same tensors)")

    @property
    def sliding_window(self) -> int | None:
        window = self.raw.get("sliding_window")
        return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


@functools.lru_cache(maxsize=1)
def shipped_configs() -> dict[str, ShippedConfig]:
    """The shipped configurations by lower-cased repo id, in file order."""
    data = json.loads(resources.files("inspector.serving").joinpath("model_configs.json").read_text("utf-8"))
    out = {}
    for m in data["models"]:
        out[m["repo_id"].lower()] = ShippedConfig(m["repo_id"], m["config"], tuple(m["config_sources"]),
                                                  int(m["published_params"]), m["published_label"],
                                                  m["published_source"], m["notes"], m.get("published_active_params"))
    return out


def config_from_hf(raw: Any, name: str) -> ModelConfig:
    """The engine's ModelConfig from a config.json dict, keeping only the keys that set tensor shapes."""
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{name}: config.json must hold a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type", "llama")
    if model_type not in LAYOUTS:
        raise ModelLoadError(f"{name}: model_type {model_type!r} has a tensor layout the calculator does not "
                             f"count (supported: {', '.join(LAYOUTS)})")
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise ModelLoadError(f"{name}: config lacks the key {key!r}")
    for key in (*REQUIRED_KEYS, "num_key_value_heads", "head_dim"):
        if raw.get(key) is not None:  # HF writes null for "derive it" (head_dim, num_key_value_heads)
            positive(raw[key], f"{name}: {key}")
    shape = {k: raw[k] for k in SHAPE_KEYS if k in raw}
    try:
        return ModelConfig.from_hf({**shape, "model_type": LAYOUTS[model_type]}, name=name)
    except UnsupportedConfigError as exc:
        raise UnsupportedConfigError(f"{name}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"{name}: bad config value: {exc}") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelLoadError(f"cannot parse {path}: {exc}") from None


def resolve_config(name_or_path: str) -> ResolvedConfig:
    """A shipped configuration by Hub repo id (case-insensitive; the part after '/' also works), or a local
    config.json file or HF model directory. Unknown names get the closest shipped ones suggested."""
    arg = str(name_or_path).strip()
    shown = arg if len(arg) <= 100 else arg[:97] + "..."
    path = Path(arg).expanduser()
    try:
        is_path = bool(arg) and path.exists()
    except OSError:  # a name too long for the file system cannot be a path
        is_path = False
    if is_path:
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ModelLoadError(f"{path} has no config.json")
        raw = _read_json(file)
        return ResolvedConfig(arg, str(file), config_from_hf(raw, arg), raw, None)
    shipped = shipped_configs()
    by_name = {**{k.split("/")[-1]: v for k, v in shipped.items()}, **shipped}
    found = by_name.get(arg.lower())
    if found is not None:
        return ResolvedConfig(found.repo_id, found.config_sources[0], config_from_hf(found.config, found.repo_id),
                              found.config, found)
    if arg.lower().endswith(".json") or arg.startswith((".", "/", "~")):
        raise ModelLoadError(f"no such file or directory: {shown}")
    close = difflib.get_close_matches(arg.lower(), list(by_name), n=3, cutoff=0.4)
    names = dict.fromkeys(by_name[c].repo_id for c in close)  # a short name and its repo id are one model
    hint = f"; did you mean {' or '.join(names)}?" if names else ""
    raise InputError(f"unknown config {shown!r}{hint} (`inspector memory --list` names the shipped ones; "
                     "or pass a config.json path or model directory)")
