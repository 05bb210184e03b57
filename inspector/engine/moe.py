"""Sparse mixture-of-experts MLP: a router scores every expert for each token, the k best run, and their
outputs are summed, weighted by the router.

`SparseMoE.forward(x (B, T, D), rec) -> (B, T, D)`:
1. router logits (B, T, E), one linear map of the token (`mlp.hook_router_logits`);
2. `route`: the k experts each token goes to, best first (`mlp.hook_expert_ids`, (B, T, k) long) and their
   weights (`mlp.hook_expert_weights`, (B, T, k) fp32), as each family computes them:
   - softmax over all E experts in fp32, then the k largest probabilities (Mixtral, Qwen3-MoE, OLMoE);
     Mixtral always renormalises them to sum to 1, Qwen3-MoE and OLMoE when `norm_topk_prob` is set
     (otherwise they sum to the probability mass the k experts hold);
   - Granite: the k largest logits, then a softmax over those k (`softmax_after_topk`);
3. each chosen expert, a SwiGLU down(silu(gate(x)) * up(x)), runs on the tokens that chose it; its output
   times the token's weight for it is added to the token's row (experts in ascending order, as
   transformers does). Unchosen experts are never read.
A recorder may replace any of the three points (an intervention can force other experts or weights).
Padded slots of a batch (rows with fewer tokens) are routed and computed too; their outputs mean nothing.

How a family stores its experts (HF names, so a checkpoint loads with `strict=True`) is a subclass:
- `ListExperts`: `gate` (the router, (E, D)) and `experts.{e}` modules, each with the family's projection
  names (`ExpertMLP`: gate_proj / up_proj / down_proj, Qwen3-MoE and OLMoE; `MixtralExpert`: w1 / w3 / w2);
- `StackedExperts`: Granite's `router.layer` (E, D), `input_linear.weight` (E, 2I, D: gate rows, then up)
  and `output_linear.weight` (E, D, I).
`SparseBlock` is the block whose MLP has HF's module name `block_sparse_moe` (Mixtral, Granite).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inspector.engine.config import ModelConfig
from inspector.engine.layers import Block
from inspector.engine.linear import Linear, project
from inspector.engine.trace import NoHooks, Recorder, record


def route(logits: torch.Tensor, k: int, normalize: bool, softmax_after_topk: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits (..., E) -> (expert ids (..., k) long, best first; their weights (..., k) fp32)."""
    if softmax_after_topk:  # Granite: the top-k logits, then a softmax over them alone
        top, ids = logits.float().topk(k, dim=-1)
        return ids, torch.softmax(top, dim=-1)
    probs = torch.softmax(logits.float(), dim=-1)  # (..., E)
    top, ids = probs.topk(k, dim=-1)
    return ids, (top / top.sum(dim=-1, keepdim=True) if normalize else top)


class SparseMoE(NoHooks, nn.Module):
    """Router, top-k, and the weighted sum of the chosen experts (see the module docstring)."""

    softmax_after_topk = False
    always_normalize = False  # Mixtral renormalises the top-k weights whatever the config says

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_experts, self.top_k = config.num_experts, config.num_experts_per_tok
        self.normalize = self.always_normalize or config.norm_topk_prob

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., E) in x's dtype."""
        raise NotImplementedError

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert e over tokens (n, D) -> (n, D)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        B, T, D = x.shape
        p = f"blocks.{self.layer}.mlp."
        logits = record(rec, p + "hook_router_logits", self.router_logits(x))  # (B, T, E)
        ids, weights = route(logits, self.top_k, self.normalize, self.softmax_after_topk)
        ids = record(rec, p + "hook_expert_ids", ids)  # (B, T, k)
        weights = record(rec, p + "hook_expert_weights", weights)  # (B, T, k) fp32
        flat = x.reshape(B * T, D)  # (N, D), N = B*T tokens
        ids, weights = ids.reshape(B * T, -1), weights.reshape(B * T, -1).to(x.dtype)  # (N, k) each
        if B * T == 1:  # a decode step: its k experts, no search
            out = None
            for e, w in zip(sorted(ids[0].tolist()), weights[0][ids[0].argsort()]):
                y = self.expert(e, flat) * w
                out = y if out is None else out + y
            return out.view(B, T, D)
        out = torch.zeros_like(flat)
        for e in ids.unique().tolist():  # ascending expert order
            token, slot = (ids == e).nonzero(as_tuple=True)  # the tokens that chose e, and at which rank
            out.index_add_(0, token, self.expert(e, flat[token]) * weights[token, slot, None])
        return out.view(B, T, D)


class ExpertMLP(NoHooks, nn.Module):
    """One SwiGLU expert with the dense MLP's names: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias=False)
        self.up_proj = Linear(hidden, intermediate, bias=False)
        self.down_proj = Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MixtralExpert(NoHooks, nn.Module):
    """One SwiGLU expert with Mixtral's names: w2(silu(w1(x)) * w3(x)) (w1 the gate, w3 up, w2 down)."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.w1 = Linear(hidden, intermediate, bias=False)
        self.w2 = Linear(intermediate, hidden, bias=False)
        self.w3 = Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ListExperts(SparseMoE):
    """Router `gate` and one module per expert in `experts` (Qwen3-MoE, OLMoE; Mixtral with `MixtralExpert`)."""

    expert_class: type = ExpertMLP

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        D, I = config.hidden_size, config.expert_intermediate_size
        self.gate = Linear(D, config.num_experts, bias=False)
        self.experts = nn.ModuleList(self.expert_class(D, I) for _ in range(config.num_experts))

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return self.experts[e](x)


class MixtralExperts(ListExperts):
    """Mixtral's block: top-k of the softmax, always renormalised; experts named w1 / w2 / w3."""

    expert_class = MixtralExpert
    always_normalize = True


class Router(NoHooks, nn.Module):
    """Granite's router module: its one matrix is `layer` (E, D)."""

    def __init__(self, hidden: int, num_experts: int) -> None:
        super().__init__()
        self.layer = Linear(hidden, num_experts, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class ExpertWeights(nn.Module):
    """All experts' matrices of one kind in one (E, out, in) parameter, `weight`."""

    def __init__(self, num_experts: int, out_features: int, in_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, out_features, in_features))
        nn.init.normal_(self.weight, std=0.02)


class StackedExperts(SparseMoE):
    """Granite's block: `router.layer`, `input_linear` (gate and up of every expert), `output_linear` (down)."""

    softmax_after_topk = True

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__(config, layer)
        D, I, E = config.hidden_size, config.expert_intermediate_size, config.num_experts
        self.router = Router(D, E)
        self.input_linear = ExpertWeights(E, 2 * I, D)
        self.output_linear = ExpertWeights(E, D, I)

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.router(x)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = project(x, self.input_linear.weight[e]).chunk(2, dim=-1)  # (n, I) each
        return project(F.silu(gate) * up, self.output_linear.weight[e])


class SparseBlock(Block):
    """A block whose MLP (a mixture of experts) has HF's module name `block_sparse_moe` (Mixtral, Granite);
    `mlp` reads it."""

    mlp_name = "block_sparse_moe"

    @property
    def mlp(self) -> nn.Module:
        return self._modules["block_sparse_moe"]
