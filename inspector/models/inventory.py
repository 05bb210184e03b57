"""The tensor inventory: every weight tensor's HF name, shape, dtype, parameter count, bytes and group.

`build_inventory(loaded)` is a pure function of the loaded model's state-dict metadata (no tensor data is
read). An entry's `precision` is empty for a plain float tensor (its dtype says it); for a quantized one
(entries built by `inspector.quant.inventory`) it says how it is held, e.g. "int4 g32 (bf16 scale+min)", with the bytes held. A tied LM head has no tensor of its own: `entries` lists only real tensors, the "lm_head" group
totals 0 bytes, and `tied_to` names the embedding it reuses. `rows()` gives display rows for tables.
A mixture of experts' weights have groups of their own: "router" (each layer's (E, D) scoring matrix) and
"expert gate" / "expert up" / "expert down" (one tensor per expert and projection, `expert` its index), or
Granite's stacked "expert gate+up" / "expert down" (every expert of a layer in one (E, out, in) tensor,
`expert` None). `is_expert_group(group)` tells them from the shared weights every token reads.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import torch


GROUPS = ("embedding", "attention q", "attention k", "attention v", "attention qkv", "attention o",
          "mlp gate", "mlp up", "mlp gate+up", "mlp down", "router", "expert gate", "expert up", "expert gate+up",
          "expert down", "norm", "lm_head")
EXPERT_GROUPS = ("expert gate", "expert up", "expert gate+up", "expert down")
_GROUP_OF = {
    "embed_tokens": "embedding",
    "q_proj": "attention q", "k_proj": "attention k", "v_proj": "attention v", "o_proj": "attention o",
    "qkv_proj": "attention qkv", "gate_up_proj": "mlp gate+up",  # Phi-3's fused matrices
    "gate_proj": "mlp gate", "up_proj": "mlp up", "down_proj": "mlp down",
    "input_layernorm": "norm", "post_attention_layernorm": "norm", "norm": "norm",
    "q_norm": "norm", "k_norm": "norm", "pre_feedforward_layernorm": "norm", "post_feedforward_layernorm": "norm",
    "lm_head": "lm_head",
}
# A mixture of experts' tensors, by the module owning them: one per expert (Qwen3-MoE and OLMoE use the dense
# MLP's names, Mixtral w1/w3/w2) or every expert stacked (Granite's input_linear / output_linear).
_EXPERT_GROUP_OF = {"gate_proj": "expert gate", "up_proj": "expert up", "down_proj": "expert down",
                    "w1": "expert gate", "w3": "expert up", "w2": "expert down",
                    "input_linear": "expert gate+up", "output_linear": "expert down"}
TIED_HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"


def group_of(name: str) -> str:
    """`model.layers.3.self_attn.q_proj.weight` -> "attention q"; `...mlp.experts.5.up_proj.weight` -> "expert up"."""
    parts = name.split(".")
    module = parts[-2] if len(parts) > 1 else ""  # the module owning the parameter
    if (".experts." in name or module in ("input_linear", "output_linear")) and module in _EXPERT_GROUP_OF:
        return _EXPERT_GROUP_OF[module]
    if module == "gate" or (module == "layer" and len(parts) > 2 and parts[-3] == "router"):
        return "router"  # Mixtral, Qwen3-MoE, OLMoE: mlp.gate; Granite: block_sparse_moe.router.layer
    if module not in _GROUP_OF:
        raise ValueError(f"no inventory group for tensor {name!r}")
    return _GROUP_OF[module]


def is_expert_group(group: str) -> bool:
    """Whether a group holds experts' weights (read only for the tokens routed to them)."""
    return group in EXPERT_GROUPS


def expert_of(name: str) -> int | None:
    """The expert index of a one-expert tensor (`...experts.5.w1.weight` -> 5); None otherwise."""
    m = re.search(r"\.experts\.(\d+)\.", name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "bfloat16", ...
    params: int
    bytes: int
    group: str
    layer: int | None  # block index, None for embedding / final norm / lm_head
    precision: str = ""  # how the values are held when that is not just `dtype`, e.g. "int8 per-channel"
    expert: int | None = None  # the expert a one-expert tensor belongs to (a mixture of experts), else None

    def to_json(self) -> dict[str, Any]:
        out = {**asdict(self), "shape": list(self.shape)}
        if not self.precision:
            del out["precision"]  # a plain float tensor: its dtype says it
        if self.expert is None:
            del out["expert"]  # not one expert's: a shared weight, or every expert stacked
        return out


@dataclass(frozen=True)
class GroupTotal:
    group: str
    tensors: int
    params: int
    bytes: int


@dataclass(frozen=True)
class Inventory:
    entries: tuple[TensorEntry, ...]
    groups: tuple[GroupTotal, ...]  # in GROUPS order; groups with no tensors left out, lm_head kept when tied
    params: int
    bytes: int
    tied_to: str | None  # EMBEDDING when the LM head reuses it, else None
    source_format: str
    source_bytes: int

    def rows(self) -> list[list[Any]]:
        """[name, shape, dtype, params, bytes, group] per tensor, plus a row for a tied LM head."""
        out = [[e.name, "×".join(map(str, e.shape)), e.dtype, e.params, e.bytes, e.group] for e in self.entries]
        if self.tied_to:
            out.append([TIED_HEAD, "tied to embedding", "-", 0, 0, "lm_head"])
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "bytes": self.bytes,
            "tied_to": self.tied_to,
            "source_format": self.source_format,
            "source_bytes": self.source_bytes,
            "groups": [asdict(g) for g in self.groups],
            "tensors": [e.to_json() for e in self.entries],
        }


def inventory_from_state(state: dict[str, torch.Tensor], tied: bool, source_format: str = "",
                         source_bytes: int = 0) -> Inventory:
    """The inventory of a state dict (only names, shapes and dtypes are looked at)."""
    entries = []
    for name, t in state.items():
        m = re.search(r"\.layers\.(\d+)\.", name)
        params = t.numel()
        entries.append(TensorEntry(name, tuple(t.shape), str(t.dtype).removeprefix("torch."), params,
                                   params * t.element_size(), group_of(name), int(m.group(1)) if m else None,
                                   expert=expert_of(name)))
    groups = []
    for g in GROUPS:
        members = [e for e in entries if e.group == g]
        if members or (g == "lm_head" and tied):
            groups.append(GroupTotal(g, len(members), sum(e.params for e in members), sum(e.bytes for e in members)))
    return Inventory(tuple(entries), tuple(groups), sum(e.params for e in entries), sum(e.bytes for e in entries),
                     EMBEDDING if tied else None, source_format, source_bytes)


def build_inventory(loaded: Any) -> Inventory:
    """The inventory of an `inspector.models.loader.LoadedModel`."""
    return inventory_from_state(loaded.model.state_dict(), loaded.config.tie_word_embeddings,
                                loaded.source_format, loaded.source_bytes)
