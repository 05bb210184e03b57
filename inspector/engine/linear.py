"""The model's linear layer and its products with weight matrices: how a (N, K) weight multiplies
activations, and how weights are stored. (Quantized weights are `inspector.quant.linear`'s modules.)

- `Linear`: `nn.Linear` whose product runs through `project`, the module every projection of the model is.
- `project(x, weight, bias=None) -> (..., N)`: what `F.linear(x, weight, bias)` computes, x (..., K).
  An fp32 weight stored row-major (N, K) on the CPU, with several rows of x, runs as `weight @ x.T`, one
  gemm that streams the weight once; MKL's `x @ weight.T` reads it at about half that rate for 2 to 8
  rows (bench/engine.py's weight-products table). One row over an fp32 weight stored (K, N) (see
  `lay_out_weights`) with two or more torch threads runs split along K: the two halves of K as a batch of
  two products, then their sum (`_split_k`): MKL runs one row's product on one thread (23-29 GB/s with one
  thread or two), a batch of two runs one per thread (36-55 GB/s, torch 2.13 and 2.15, 2 threads; bf16's
  kernels already use both). Everything else goes to `F.linear`: one row with one thread (there `x @ W.T`
  over a weight stored (K, N) is the fastest form measured), other dtypes (bf16's kernels are fastest as
  `F.linear`) and tensor-likes (the quantized LM head).
- `lay_out_weights(model, transposed)`: each layer's q/k/v weights stacked into one matrix and gate/up
  into another, the per-matrix parameters becoming row views of it (one product instead of three, or two);
  with `transposed`, every weight matrix (the embedding / tied LM head too) is stored (in, out), so the
  parameter is a transposed view. Every matrix lies in one huge-page-backed buffer, in the order a forward
  reads them. The model then owns all its weights (no memory-mapped file behind them). HF names, shapes,
  values and the state dict are unchanged.
- `stacked_weight(module, names)`: the (sum N, K) matrix of the named Linear submodules' weights when
  they lie stacked in one buffer, else None. Cached on the module and rechecked by identity and address,
  so a weight replaced later (a state dict loaded with assign=True, quantized modules, `model.double()`)
  falls back to separate products instead of reading stale memory. None too while any of them requires
  grad: a stacked view would send the whole product's gradient to the first weight only (a backward pass
  runs them one by one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.memory import huge_page_buffer
from inspector.engine.trace import NoHooks

QKV = ("q_proj", "k_proj", "v_proj")  # an attention module's projections stacked into one product
GATE_UP = ("gate_proj", "up_proj")  # an MLP's projections stacked into one product


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., K) times weight (N, K) transposed, plus bias: (..., N), as F.linear."""
    fp32_cpu = type(weight) in (torch.Tensor, nn.Parameter) and weight.dtype == torch.float32 \
        and weight.device.type == "cpu"
    one_row = x.numel() == x.shape[-1]
    if fp32_cpu and one_row and weight.shape[1] % 2 == 0 and weight.stride(0) == 1 and torch.get_num_threads() > 1:
        y = _split_k(x.reshape(1, -1), weight)
        return (y if bias is None else y + bias).view(*x.shape[:-1], weight.shape[0])
    if not (fp32_cpu and weight.is_contiguous()) or one_row:
        return F.linear(x, weight) if bias is None else F.linear(x, weight, bias)  # tensor-likes take (x, w)
    *lead, K = x.shape
    y = torch.mm(weight, x.reshape(-1, K).t()).t()  # (M, N), a transposed view of W @ x.T
    if bias is not None:
        y = y + bias
    return y.view(*lead, weight.shape[0])  # (..., N)


def _split_k(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (1, K) times a weight (N, K) stored (K, N), as two half-K products in one batch: (1, N)."""
    N, K = weight.shape
    halves = weight.t().view(2, K // 2, N)  # (2, K/2, N): rows 0..K/2-1 and K/2..K-1 of the (K, N) storage
    return torch.bmm(x.view(2, 1, K // 2), halves).sum(0)  # (2, 1, N) -> (1, N); one thread per half


class Linear(NoHooks, nn.Linear):
    """nn.Linear computed by `project` (the weight product in the form this CPU runs fastest)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.bias)


def lay_out_weights(model: nn.Module, transposed: bool,
                    release: Callable[[torch.Tensor], None] | None = None) -> None:
    """Store the 2-D projection weights as row views of stacked buffers: each block's q/k/v together and
    its gate/up together (see `stacked_weight`); with `transposed`, every matrix (the embedding / tied LM
    head too) is stored (in, out), so a weight is a transposed view (F.linear then streams it as x @ W_t).
    Every matrix is written into one buffer per dtype, in the order a forward reads them, backed by huge
    pages where the kernel offers them (`inspector.engine.memory.huge_page_buffer`); every other parameter
    is copied too. Afterwards the model holds its own memory and nothing keeps the memory-mapped weights
    file open (its pages would otherwise stay resident beside the copies).
    `release(old)` is called on each replaced tensor once its copy is made (the loader drops the mapped
    file's pages with it); the caller must never read those tensors again. Values, names and shapes unchanged."""
    groups = []
    for block in model.model.layers:
        attn, mlp = block.self_attn, block.mlp
        groups += [(attn, QKV), (attn, ("o_proj",)), (mlp, GATE_UP), (mlp, ("down_proj",))]
    stacks = []  # (modules, attr, their tensors): each written as one stacked tensor
    for owner, names in groups:
        modules = [getattr(owner, n, None) for n in names]  # a fused family (Phi-3) has none of them
        if not all(isinstance(m, nn.Linear) for m in modules):
            continue
        for attr in ("weight", "bias"):
            parts = [getattr(m, attr) for m in modules]
            if all(p is not None for p in parts):
                stacks.append((modules, attr, parts))
    stacked = {id(p) for _, _, parts in stacks for p in parts}
    singles = [(module, name, p) for module in model.modules()
               for name, p in list(module.named_parameters(recurse=False)) if id(p) not in stacked]
    matrices = [parts for _, _, parts in stacks if parts[0].dim() == 2] + [[p] for _, _, p in singles if p.dim() == 2]
    arena = _MatrixArena(matrices)

    for modules, attr, parts in stacks:
        if parts[0].dim() == 2:
            whole = arena.place(parts, transposed)  # (sum N, K)
        else:
            whole = torch.cat([p.detach() for p in parts])  # (sum N,): a bias
        for m, view in zip(modules, whole.split([p.shape[0] for p in parts])):
            setattr(m, attr, nn.Parameter(view, requires_grad=False))
        for p in parts:
            _release(release, p)
    for module, name, p in singles:
        own = arena.place([p], transposed) if p.dim() == 2 else p.detach().clone()
        setattr(module, name, nn.Parameter(own, requires_grad=False))
        _release(release, p)


class _MatrixArena:
    """One huge-page buffer per (dtype, device) for the given matrices (lists stacked along their rows), handed
    out in order by `place`, each matrix starting ALIGN elements apart. Off the CPU, one plain buffer."""

    ALIGN = 64  # elements: every matrix starts at least a 64-byte cache line apart (256 bytes in fp32)

    def __init__(self, matrices: list[list[torch.Tensor]]) -> None:
        sizes: dict[tuple, int] = {}
        for parts in matrices:
            key = (parts[0].dtype, parts[0].device)
            sizes[key] = sizes.get(key, 0) + self._span(sum(p.numel() for p in parts))
        self._free = {key: self._buffer(n, *key) for key, n in sizes.items()}

    def place(self, parts: list[torch.Tensor], transposed: bool) -> torch.Tensor:
        """parts (n_i, K) written one after another into the next free span: a (sum n_i, K) tensor, stored
        (K, sum n_i) when `transposed`."""
        N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
        key = (parts[0].dtype, parts[0].device)
        span, self._free[key] = self._free[key][:N * K], self._free[key][self._span(N * K):]
        stored = span.view(K, N) if transposed else span.view(N, K)  # the storage order
        whole = stored.t() if transposed else stored  # (N, K)
        row = 0
        for p in parts:
            whole[row:row + p.shape[0]].copy_(p.detach())
            row += p.shape[0]
        return whole

    @classmethod
    def _span(cls, numel: int) -> int:
        return -(-numel // cls.ALIGN) * cls.ALIGN

    @staticmethod
    def _buffer(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if device.type == "cpu":
            return huge_page_buffer(numel, dtype)
        return torch.empty(numel, dtype=dtype, device=device)


def _release(release: Callable[[torch.Tensor], None] | None, old: torch.Tensor) -> None:
    if release is not None:
        release(old.detach())


def stacked_weight(module: nn.Module, names: Sequence[str], attr: str = "weight") -> torch.Tensor | None:
    """The named submodules' `attr` tensors as one stacked tensor (rows in order), or None when they are
    not adjacent rows of one buffer (then run them one by one)."""
    parts = [_attribute(module, n, attr) for n in names]
    if torch.is_grad_enabled() and any(getattr(p, "requires_grad", False) for p in parts):
        return None  # autograd: each weight its own product, so each gets its own gradient
    cache = module.__dict__.setdefault("_stacked", {})
    hit = cache.get((tuple(names), attr))
    if hit is not None and all(a is b for a, b in zip(hit[0], parts)) and _still_over(hit[1], parts[0]):
        return hit[1]
    stacked = _adjacent(parts)
    cache[(tuple(names), attr)] = (parts, stacked)
    return stacked


def _still_over(stacked: torch.Tensor | None, first: object) -> bool:
    """True unless the parameters' data was swapped under the same objects since `stacked` was made
    (`model.double()`, `.to(...)` convert in place): then the view reads the old memory."""
    return stacked is None or (stacked.data_ptr() == first.data_ptr() and stacked.dtype == first.dtype)


def _attribute(module: nn.Module, name: str, attr: str) -> object:
    """module.name.attr, read from the modules' own dicts first (nn.Module's __getattr__ costs a
    microsecond a call, and a decode step asks twice per layer), else by getattr (properties, buffers)."""
    sub = module._modules.get(name)
    if sub is None:
        sub = getattr(module, name)
    found = sub._parameters.get(attr) if isinstance(sub, nn.Module) else None
    return found if found is not None else getattr(sub, attr, None)


def _adjacent(parts: list) -> torch.Tensor | None:
    """One view over same-strided tensors that follow each other along their first dimension in one
    storage (row-major or transposed), else None."""
    first = parts[0]
    if not all(type(p) in (torch.Tensor, nn.Parameter) for p in parts):
        return None
    if any(p.shape[1:] != first.shape[1:] or p.stride() != first.stride() or p.dtype != first.dtype
           or p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() for p in parts):
        return None
    row_bytes = first.stride(0) * first.element_size()
    offset = 0
    for p in parts:
        if p.data_ptr() != first.data_ptr() + offset:
            return None
        offset += p.shape[0] * row_bytes
    return first.as_strided((sum(p.shape[0] for p in parts), *first.shape[1:]), first.stride())
