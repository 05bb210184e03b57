"""The quantized weight modules that replace the model's projections, embedding and LM head.

Each holds one (N, K) matrix in a low-precision form and keeps the model's activations fp32 (a kernel path
casts its input to bf16 for the matmul, then the output back): `forward(x (..., K))
-> (..., N)` fp32, as `nn.Linear` would, plus `rows(ids) -> (len(ids), K)` fp32 (an embedding lookup that
dequantizes only the rows read), `dequantize() -> (N, K)` fp32 (the matrix the forward multiplies by, up
to rounding order), `nbytes` (what the module holds: packed weights, scales, zeros, bias) and
`precision` (a label for the inventory).

Compute paths (`path`), chosen by `bench/quant.py`'s kernel table on this CPU (run it for the timings):
- bf16: `F.linear` on bf16 weights with the input cast to bf16, the output cast back to fp32 (oneDNN's
  bf16 matmul; the weights are read at half the bytes).
- int8 "kernel" (the default where torch has it): `aten._weight_int8pack_mm` on bf16 activations with a
  bf16 scale, faster than an fp32 matmul here. "dequant": `F.linear(x, q.float()) * scale`, converting the
  int8 matrix per call (the scale applied to the N outputs instead of the N x K weights).
- int4 "kernel" (the default where torch has it): `aten._weight_int4pack_mm_for_cpu` on bf16 activations,
  about as fast as an fp32 matmul here; "dequant" unpacks the nibbles, applies scale and zero per group,
  then runs `F.linear`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.trace import NoHooks
from inspector.quant import packing

INT8_PATHS = ("dequant", "kernel")
INT4_PATHS = ("dequant", "kernel")


class QuantWeight(NoHooks, nn.Module):
    """Base: one (N, K) matrix plus an optional fp32 bias (shared with the fp32 model, not copied)."""

    precision = "?"
    path = "dequant"

    def __init__(self, out_features: int, in_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = out_features, in_features
        self.bias = bias

    def dequantize(self) -> torch.Tensor:
        raise NotImplementedError

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _tensors(self) -> list[torch.Tensor]:
        return [b for b in self.buffers(recurse=False)] + ([self.bias] if self.bias is not None else [])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def _bias(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.bias is None else y + self.bias


class Bf16Linear(QuantWeight):
    precision = "bf16"
    path = "bf16 matmul"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__(*weight.shape, bias)
        self.register_buffer("weight", weight.to(torch.bfloat16))  # (N, K)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._bias(F.linear(x.to(torch.bfloat16), self.weight).float())

    def dequantize(self) -> torch.Tensor:
        return self.weight.float()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids].float()


class Int8Linear(QuantWeight):
    @property
    def precision(self) -> str:
        return f"int8 per-channel ({'bf16' if self.path == 'kernel' else 'fp32'} scale)"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, path: str = "dequant") -> None:
        super().__init__(*weight.shape, bias)
        if path not in INT8_PATHS:
            raise ValueError(f"int8 path must be one of {INT8_PATHS}, got {path!r}")
        self.path = path
        q, scale = packing.quantize_int8(weight)
        self.register_buffer("qweight", q)  # (N, K) int8
        self.register_buffer("scale", scale.to(torch.bfloat16) if path == "kernel" else scale)  # (N,) as the path takes it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.path == "kernel":
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (B*T, K): the kernel takes a matrix
            y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scale)
            return self._bias(y.float().view(*x.shape[:-1], self.out_features))
        return self._bias(F.linear(x, self.qweight.float()) * self.scale)  # (x @ q^T) * scale = x @ (q * scale)^T

    def dequantize(self) -> torch.Tensor:
        return packing.dequantize_int8(self.qweight, self.scale.float())

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.qweight[ids].float() * self.scale[ids].float()[..., None]


class Int4Linear(QuantWeight):
    """int4 group-wise. "dequant" holds `packing`'s layout (fp16 scale and min) and multiplies in fp32;
    "kernel" holds the layout of `aten._weight_int4pack_mm_for_cpu` (its packed nibbles and a bf16
    (groups, N, 2) table of scale and zero, where w = (q - 8) * scale + zero) and runs that kernel on bf16
    activations. Both are quantized by `packing.quantize_int4`; the kernel's bf16 table rounds scale and
    zero further (8 bits of mantissa instead of 11)."""

    def __init__(self, weight: torch.Tensor, group: int, bias: torch.Tensor | None = None, path: str = "dequant") -> None:
        super().__init__(*weight.shape, bias)
        if path not in INT4_PATHS or (path == "kernel" and not has_int4_kernel()):
            raise ValueError(f"int4 path {path!r} is not available (paths: {INT4_PATHS})")
        self.group, self.path = group, path
        self.precision = f"int4 g{group} ({'bf16' if path == 'kernel' else 'fp16'} scale+min)"
        packed, scale, zero = packing.quantize_int4(weight, group)
        if path == "dequant":
            self.register_buffer("qweight", packed)  # (N, K/2) uint8
            self.register_buffer("scale", scale)  # (N, K/group) fp16
            self.register_buffer("zero", zero)  # (N, K/group) fp16
            return
        q = packing.unpack_int4(packed).to(torch.int32)  # (N, K), the kernel's converter takes int32
        self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))  # (N, K/2) uint8
        table = torch.stack((scale.float(), zero.float() + 8 * scale.float()), dim=-1)  # (N, G, 2): q-8 centred
        self.register_buffer("scale_zero", table.transpose(0, 1).contiguous().to(torch.bfloat16))  # (G, N, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.path == "kernel":
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (B*T, K)
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.qweight, self.group, self.scale_zero)
            return self._bias(y.float().view(*x.shape[:-1], self.out_features))
        return self._bias(F.linear(x, self.dequantize()))

    def dequantize(self) -> torch.Tensor:
        if self.path == "kernel":  # the kernel applied to the identity, in fp32: exactly its weights, transposed
            eye = torch.eye(self.in_features)
            table = self.scale_zero.float()
            return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.qweight, self.group, table).t().contiguous()
        return packing.dequantize_int4(self.qweight, self.scale, self.zero)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        if self.path == "kernel":
            raise ValueError("the int4 kernel layout has no row lookup: embed with the dequant path")
        flat = ids.reshape(-1)
        deq = packing.dequantize_int4(self.qweight[flat], self.scale[flat], self.zero[flat])  # (n, K)
        return deq.view(*ids.shape, self.in_features)


def has_int8_kernel() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


def has_int4_kernel() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


KERNEL_GROUPS = (32, 64, 128, 256)  # the group sizes the int4 kernel takes


def int4_kernel_fits(out_features: int, group: int) -> bool:
    """Whether the int4 kernel takes this matrix: outputs a multiple of 16 and one of its group sizes."""
    return has_int4_kernel() and out_features % 16 == 0 and group in KERNEL_GROUPS


def quantize_weight(weight: torch.Tensor, bias: torch.Tensor | None, weights: str, group: int | None,
                    int8_path: str = "dequant", int4_path: str = "dequant") -> QuantWeight:
    """The module holding `weight` (N, K) in precision `weights` ("bf16", "int8", "int4")."""
    weight = weight.contiguous()  # row-major (N, K), as every kernel here takes it (fp32 may be stored (K, N))
    if weights == "bf16":
        return Bf16Linear(weight, bias)
    if weights == "int8":
        return Int8Linear(weight, bias, int8_path)
    if weights == "int4":  # a matrix the kernel cannot take falls back to the dequant path
        return Int4Linear(weight, group, bias, int4_path if int4_kernel_fits(weight.shape[0], group) else "dequant")
    raise ValueError(f"no quantized module for {weights!r}")


class QuantEmbedding(NoHooks, nn.Module):
    """Token ids (B, T) -> embeddings (B, T, D) fp32, dequantizing only the rows looked up.

    `weight` is an empty fp32 tensor: it only tells readers of `embed_tokens.weight` (the engine's
    `new_cache`, the app's admission) the activations' dtype and device; the table is `table`."""

    def __init__(self, table: QuantWeight) -> None:
        super().__init__()
        self.table = table
        self.register_buffer("weight", torch.empty(0, dtype=torch.float32), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table.rows(ids)  # (B, T, D)
