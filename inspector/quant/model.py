"""A quantized copy of a loaded model that shares the fp32 model's unquantized tensors.

`quantize_model(fp32, scheme, int8_path=DEFAULT_INT8_PATH, int4_path=DEFAULT_INT4_PATH) -> QuantTransformer`: the
engine's `Transformer` (same
forward, same trace points, same cache contract) whose linear projections, token embedding and LM head
are held by the modules of `inspector.quant.linear`. What stays fp32, shared with the fp32 model (the
very same tensors, nothing copied):
- the RMSNorm weights (61 vectors of 576 for the default model, 0.03% of the parameters): they scale each
  feature of the normalized stream, an error there multiplies into every token, and they cost nothing;
- RoPE's inv_freq buffer, and the biases of models that have them (Qwen2's q/k/v).
The residual stream and the KV cache stay fp32 (each kernel takes its matmul's input in bf16; the KV cache
can be int8 by its own switch: `inspector.quant.kv_int8`).
The embedding is quantized with the same scheme: for a tied model it is also the LM head, whose output
channels are its rows, so int8 per output channel is int8 per token row, and int4 groups run along the
hidden dimension. Keeping it fp32 would hold 113 MB of the default model's 538 MB (21%) in full precision.
With int4's kernel path the tied LM head is a second int4 copy in the kernel's layout (that layout has no
row lookup for the embedding): 18 MB more for the default model, counted in `weight_bytes`.

`quantize_loaded(loaded, scheme, kv=None) -> QuantLoadedModel`: a `LoadedModel` over the quantized model
(same tokenizer and config) carrying its `scheme` and `kv` precision. `Scheme` strings and their errors:
`inspector.quant.schemes`. `weight_bytes(model)`: the bytes a model's weights hold, each shared tensor once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.models.loader import LoadedModel
from inspector.quant.linear import (QuantEmbedding, QuantWeight, has_int4_kernel, has_int8_kernel, int4_kernel_fits,
                                    quantize_weight)
from inspector.quant.schemes import Scheme, check_shapes, parse_kv, parse_scheme

# the compute paths, chosen by bench/quant.py's kernel table (see inspector.quant.linear)
DEFAULT_INT8_PATH = "kernel" if has_int8_kernel() else "dequant"
DEFAULT_INT4_PATH = "kernel" if has_int4_kernel() else "dequant"
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
FUSED = ("self_attn.qkv_proj", "mlp.gate_up_proj")  # Phi-3's stacked matrices, quantized as they are


def projections(block: nn.Module) -> list[str]:
    """The weight matrices of a block that are quantized (its family's own: separate or fused)."""
    return [p for p in (*PROJECTIONS, *FUSED) if hasattr(getattr(block, p.split(".")[0]), p.split(".")[1])]


class QuantHead:
    """Stands in for the LM head's weight tensor: the engine's `F.linear(x, model.unembed_weight)` (in
    `forward` and `unembed`) dispatches here through PyTorch's `__torch_function__` protocol for
    tensor-like objects, and runs the quantized module instead, so the engine's forward is reused as is."""

    def __init__(self, module: QuantWeight) -> None:
        self.module = module

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in (F.linear, torch._C._nn.linear) and len(args) == 2 and not kwargs.get("bias"):
            x, head = args
            return head.module(x)
        raise TypeError(f"a quantized LM head supports only F.linear(x, head), not {func}")


class QuantTransformer(Transformer):
    """The engine's Transformer over quantized weights (see the module doc); `scheme` says which."""

    def __init__(self, fp32: Transformer, scheme: Scheme, int8_path: str = DEFAULT_INT8_PATH,
                 int4_path: str = DEFAULT_INT4_PATH) -> None:
        with torch.device("meta"):  # the skeleton's fp32 matrices are placeholders, replaced below
            super().__init__(fp32.config)
        self.scheme = scheme
        src, dst = fp32.model, self.model
        self.inv_freq = fp32.inv_freq  # shared buffer

        def q(lin: nn.Module, path4: str = int4_path) -> QuantWeight:
            return quantize_weight(lin.weight.detach(), getattr(lin, "bias", None), scheme.weights, scheme.group,
                                   int8_path, path4)

        for block_src, block in zip(src.layers, dst.layers):
            block.input_layernorm = block_src.input_layernorm  # shared fp32 modules
            block.post_attention_layernorm = block_src.post_attention_layernorm
            for path in projections(block_src):
                owner, name = path.split(".")
                setattr(getattr(block, owner), name, q(getattr(getattr(block_src, owner), name)))
        dst.norm = src.norm
        dst.embed_tokens = QuantEmbedding(q(src.embed_tokens, "dequant"))  # row lookups need packing's layout
        if not self.config.tie_word_embeddings:
            self.lm_head = q(fp32.lm_head)
        elif scheme.weights == "int4" and int4_path != "dequant" and int4_kernel_fits(self.config.vocab_size, scheme.group):
            self.tied_head = q(src.embed_tokens)  # the same matrix in the kernel's layout, for the LM head
        own = dict([*fp32.named_parameters(), *fp32.named_buffers()])
        for name, t in [*self.named_parameters(), *self.named_buffers()]:
            if t.is_meta and name in own:  # the family's other fp32 tensors (q/k norms, post-norms, RoPE bases): shared
                owner, attr = self.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]
                if attr in owner._parameters:
                    owner._parameters[attr] = own[name]
                else:
                    owner._buffers[attr] = own[name]
        left = [n for n, t in [*self.named_parameters(), *self.named_buffers()] if t.is_meta]
        if left:
            raise RuntimeError(f"quantize_model left placeholder tensors: {left[:3]}")
        self.eval()

    @property
    def head_module(self) -> QuantWeight:
        if not self.config.tie_word_embeddings:
            return self.lm_head
        return getattr(self, "tied_head", self.model.embed_tokens.table)

    @property
    def unembed_weight(self) -> Any:
        """The LM head as a tensor-like `QuantHead` (see there); `dequantize()` of `head_module` for a tensor."""
        return QuantHead(self.head_module)

    def quant_modules(self) -> dict[str, QuantWeight]:
        """HF tensor name -> the module holding it quantized (a tied head is the embedding's entry)."""
        out = {"model.embed_tokens.weight": self.model.embed_tokens.table}
        for i, block in enumerate(self.model.layers):
            for path in projections(block):
                owner, name = path.split(".")
                out[f"model.layers.{i}.{path}.weight"] = getattr(getattr(block, owner), name)
        if not self.config.tie_word_embeddings:
            out["lm_head.weight"] = self.lm_head
        elif hasattr(self, "tied_head"):
            out["lm_head.weight (tied, kernel layout)"] = self.tied_head
        return out

    def dequantized_state(self) -> dict[str, torch.Tensor]:
        """An fp32 state dict of what this model computes with: for `Transformer.load_state_dict` (tests)."""
        state = {}
        for name, module in self.quant_modules().items():
            if "tied" in name:
                continue  # a second copy of the embedding: the fp32 model has one matrix for both
            state[name] = module.dequantize()
            if module.bias is not None:
                state[name.removesuffix("weight") + "bias"] = module.bias
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):  # every norm (q/k norms and Gemma's post-norms too)
                state[name] = p
        return state


def quantize_model(fp32: Transformer, scheme: Scheme | str, int8_path: str = DEFAULT_INT8_PATH,
                   int4_path: str = DEFAULT_INT4_PATH) -> QuantTransformer:
    """A quantized copy of an fp32 model (see the module doc); InputError on a bad scheme or shapes."""
    scheme = parse_scheme(scheme) if isinstance(scheme, str) else scheme
    if scheme.weights == "fp32":
        raise ValueError("fp32 is the model itself: nothing to quantize")
    if fp32.model.embed_tokens.weight.dtype != torch.float32:
        raise InputError(f"{scheme.label} quantizes an fp32 model: load it in fp32 (not --dtype bf16)")
    check_shapes(scheme, fp32.config)
    with torch.inference_mode(False), torch.no_grad():
        return QuantTransformer(fp32, scheme, int8_path, int4_path)


def weight_bytes(model: nn.Module) -> int:
    """Bytes held by a model's parameters and buffers, each storage counted once (shared ones too)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.untyped_storage().data_ptr()
        if t.numel() and key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def planned_weight_bytes(fp32: Transformer, scheme: Scheme, int4_path: str = DEFAULT_INT4_PATH,
                         int8_path: str = DEFAULT_INT8_PATH) -> int:
    """The bytes `quantize_model(fp32, scheme)` would hold, from the fp32 model's shapes alone (no build)."""
    if scheme.weights == "fp32":
        return weight_bytes(fp32)
    per_matrix = {"bf16": lambda n, k: 2 * n * k, "int8": lambda n, k: n * k + (2 if int8_path == "kernel" else 4) * n,
                  "int4": lambda n, k: n * k // 2 + 2 * 2 * n * (k // scheme.group)}[scheme.weights]
    total = fp32.inv_freq.nbytes
    for name, p in fp32.named_parameters():
        quantized = name.endswith(".weight") and ("proj" in name or "embed_tokens" in name or name == "lm_head.weight")
        total += per_matrix(*p.shape) if quantized else p.nbytes  # norms and biases: shared fp32
    cfg = fp32.config
    kernel_head = int4_path != "dequant" and int4_kernel_fits(cfg.vocab_size, scheme.group or 0)
    if scheme.weights == "int4" and cfg.tie_word_embeddings and kernel_head:
        total += per_matrix(*fp32.model.embed_tokens.weight.shape)  # the LM head's kernel-layout copy
    return total


@dataclasses.dataclass
class QuantLoadedModel(LoadedModel):
    """A LoadedModel over a quantized model; `scheme` of its weights, `kv` ("fp32" | "int8") of its KV cache."""

    scheme: Scheme = Scheme("fp32")
    kv: str = "fp32"


def quantize_loaded(loaded: LoadedModel, scheme: str | None, kv: str | None = None) -> QuantLoadedModel:
    """The loaded model with its weights in `scheme` (None or "fp32": the same model, shared) and its KV
    cache precision `kv` (None: fp32). InputError on an unknown scheme, a group size that does not fit."""
    parsed, kv = parse_scheme(scheme or "fp32"), parse_kv(kv)
    model = loaded.model if parsed.weights == "fp32" else quantize_model(loaded.model, parsed)
    fields = {f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedModel)}
    fields.update(model=model, dtype=torch.float32)
    if parsed.weights != "fp32":
        fields["source_format"] = f"{loaded.source_format}, held as {parsed.label} in memory"
    return QuantLoadedModel(**fields, scheme=parsed, kv=kv)
