"""Mixture-of-experts costs from a config alone: what memory holds against what a token or a step reads.

Memory holds every expert (`inspector.serving.memory.count_params` / `weight_bytes` count them all). One
token's forward uses the shared weights (attention, routers, norms, embedding and LM head) and, in each
layer, the k experts its router chose: `count_active_params(cfg)` (the "active" count of the published
cards; a dense model's is its whole count). `expert_costs(cfg, dtype)` splits the weight bytes into shared
and per-expert: a batch-1 decode step reads the shared weights and k experts per layer; a step over B
tokens reads the union of their experts, whose expected size per layer, when routing is uniform and
independent, is E·(1 − (1 − k/E)^B) (`expected_experts`; real routers are not uniform, so a real batch
reads fewer distinct experts when its tokens agree). An untied embedding table is counted whole among the
shared weights here; a step reads only its tokens' rows of it (`inspector.serving.roofline` counts those).
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.engine.config import ModelConfig
from inspector.models.inventory import is_expert_group
from inspector.serving.memory import count_params, tensor_bytes, tensors


def expected_experts(num_experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts B = `tokens` tokens go to in one layer, in expectation when each picks its top_k of
    num_experts uniformly and independently: E·(1 − (1 − k/E)^B)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


@dataclass(frozen=True)
class ExpertCosts:
    """A mixture of experts' weights split into what every token reads and what only routed tokens read."""

    num_experts: int  # E per layer
    top_k: int  # k per token
    layers: int
    shared_params: int  # every tensor outside the experts (routers included)
    params_per_expert: int  # one expert of one layer
    shared_bytes: int  # in the dtype asked for
    bytes_per_expert: int

    @property
    def expert_params(self) -> int:
        """Every expert of every layer: what memory holds beyond the shared weights."""
        return self.layers * self.num_experts * self.params_per_expert

    def step_bytes(self, tokens: float) -> float:
        """Weight bytes one forward over `tokens` tokens reads, routing uniform: the shared weights plus the
        expected distinct experts per layer (exactly k per layer for one token)."""
        experts = expected_experts(self.num_experts, self.top_k, tokens)
        return self.shared_bytes + self.layers * experts * self.bytes_per_expert


def expert_costs(cfg: ModelConfig, dtype: str) -> ExpertCosts | None:
    """The shared / per-expert split of a mixture of experts' weights in `dtype`; None for a dense model."""
    if not cfg.moe:
        return None
    shared = [t for t in tensors(cfg) if not is_expert_group(t.group)]
    experts = [t for t in tensors(cfg) if is_expert_group(t.group)]
    n = cfg.num_hidden_layers * cfg.num_experts  # every expert tensor holds 1 expert, or E stacked
    return ExpertCosts(cfg.num_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers,
                       sum(t.params for t in shared), sum(t.params for t in experts) // n,
                       sum(tensor_bytes(t, dtype) for t in shared), sum(tensor_bytes(t, dtype) for t in experts) // n)


def count_active_params(cfg: ModelConfig) -> int:
    """Parameters one token's forward uses: all of a dense model's; a mixture of experts' shared tensors plus
    k experts in each layer."""
    costs = expert_costs(cfg, "fp32")
    if costs is None:
        return count_params(cfg)
    return costs.shared_params + costs.layers * costs.top_k * costs.params_per_expert
