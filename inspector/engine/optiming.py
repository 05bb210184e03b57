"""Per-operation timing of one forward: how long each layer's qkv, attention, o, gate/up, down, norms and
the LM head take (a mixture of experts: its router, the routing and the chosen experts instead of
gate/up and down), with the bytes each reads and its GB/s.

`OpTimer` is a recorder (see `inspector.engine.trace`): the model calls it at every trace point in order,
so the time between two consecutive points is the operation between them (`SEGMENTS`: e.g. from
`attn.hook_rot_k` to `attn.hook_z` is the attention itself: cache update, scores, softmax, weighted
sum). It asks for no attention map (those are extra work), keeps no tensor but a mixture of experts'
chosen expert ids (a few integers per token, to count the experts each layer read), and on a GPU synchronises
at each point (the device runs asynchronously), which slows the step it times. Points inside an operation
(k, v, rot_k, a post-norm's input) do not split it; the Python between two points (a trace call costs
about a microsecond) counts in the operation it precedes.

`op_table(config, timer, context, elem_bytes, sampling_s)` -> [OpTime]: per layer and operation, seconds,
bytes read (weights of the products; K and V of `context` positions for attention; one (B, T, D)
activation for the others; the experts' weights only for the distinct experts the forward's tokens went to in
that layer, as the MoE layer reads no other) and FLOPs (2 per weight per token; 4 * H * d per query-key pair). `totals`
sums it per operation over the layers, for a table or a roofline plot.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import torch

from inspector.engine.config import ModelConfig

# (trace point where the operation ends, operation); it starts at the previous point the model emitted.
SEGMENTS = {
    "ln1.hook_normalized": "norms",
    "attn.hook_q": "qkv",
    "attn.hook_rot_q": "rope (q/k norms)",
    "attn.hook_z": "attention",
    "hook_attn_out": "o (post-norm)",
    "hook_mlp_out": "down (post-norm)",
    "hook_resid_mid": "residual adds",
    "ln2.hook_normalized": "norms",
    "mlp.hook_pre": "gate/up",
    "mlp.hook_post": "activation",
    "hook_resid_post": "residual adds",
    "mlp.hook_router_logits": "router",  # a mixture of experts' MLP: router, softmax + top-k, then the experts
    "mlp.hook_expert_weights": "routing",
}
EXPERTS = "experts"  # a mixture of experts' op ending at hook_mlp_out (a dense MLP's is "down (post-norm)")
GLOBAL_SEGMENTS = {"hook_embed": "embedding", "ln_final.hook_normalized": "final norm",
                   "unembed.hook_logits": "LM head"}
OPS = ("embedding", "norms", "qkv", "rope (q/k norms)", "attention", "o (post-norm)", "residual adds", "gate/up", "activation",
       "down (post-norm)", "final norm", "LM head", "sampling")  # a dense forward's, in order
MOE_OPS = ("router", "routing", EXPERTS)  # a mixture of experts' MLP instead of gate/up, activation, down
ORDER = (*OPS[:OPS.index("final norm")], *MOE_OPS, *OPS[OPS.index("final norm"):])


class OpTimer:
    """Recorder noting the time at each trace point of one forward (call `start()` right before it)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.sync = torch.device(device).type == "cuda"
        self.marks: list[tuple[str, float]] = []
        self.expert_ids: dict[int, torch.Tensor] = {}  # layer -> (B, T, k) chosen experts (a mixture of experts)

    def wants(self, name: str) -> bool:
        return not name.endswith(("hook_attn_scores", "hook_pattern"))

    def start(self) -> None:
        if self.sync:
            torch.cuda.synchronize()
        self.marks = [("start", time.perf_counter())]

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if self.sync:
            torch.cuda.synchronize()
        self.marks.append((name, time.perf_counter()))
        if name.endswith(".mlp.hook_expert_ids"):
            self.expert_ids[int(name.split(".")[1])] = value  # a reference; counted after the forward

    def experts_read(self, layer: int) -> int:
        """Distinct experts the forward's tokens went to in `layer` (0 for a dense model)."""
        ids = self.expert_ids.get(layer)
        return 0 if ids is None else int(ids.unique().numel())

    def segments(self) -> list[tuple[int | None, str, float]]:
        """(layer or None, operation, seconds) per operation, in order: the time since the previous operation
        ended, up to the point that ends this one (points inside an operation, like k, v or rot_k, do not)."""
        out: list[tuple[int | None, str, float]] = []
        since = self.marks[0][1] if self.marks else 0.0
        for name, t in self.marks[1:]:
            if name.startswith("blocks."):
                _, layer, point = name.split(".", 2)
                op, where = SEGMENTS.get(point), int(layer)
            else:
                op, where = GLOBAL_SEGMENTS.get(name), None
            if op == "down (post-norm)" and out and out[-1][1] == "routing":
                op = EXPERTS  # after a mixture of experts' routing: every chosen expert's gate/up and down
            if op is not None:
                out.append((where, op, t - since))
                since = t
        return out


@dataclass(frozen=True)
class OpTime:
    layer: int | None  # None: outside the blocks (final norm, LM head, sampling)
    op: str
    seconds: float
    bytes_read: int
    flops: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else 0.0


def _costs(cfg: ModelConfig, tokens: int, context: int, elem: int, experts: int = 0) -> dict[str, tuple[int, int]]:
    """op -> (bytes read, FLOPs) for one layer (the LM head and final norm: once) of a forward of `tokens`
    new positions after `context` cached ones; `experts`: the distinct experts a mixture of experts' layer read."""
    D, I, d, V = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.vocab_size
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    act = tokens * D * elem
    qkv, o, gate_up, down = D * (H + 2 * KV) * d, H * d * D, 2 * D * I, I * D
    pairs = tokens * context + tokens * (tokens + 1) // 2
    return {
        "norms": (2 * act, 8 * tokens * D), "qkv": (qkv * elem + act, 2 * qkv * tokens),
        "rope (q/k norms)": (tokens * (H + KV) * d * elem, 6 * tokens * (H + KV) * d),
        "attention": (2 * KV * (context + tokens) * d * elem, 4 * H * d * pairs),
        "o (post-norm)": (o * elem + tokens * H * d * elem, 2 * o * tokens), "residual adds": (4 * act, 2 * tokens * D),
        "gate/up": (gate_up * elem + act, 2 * gate_up * tokens), "activation": (2 * tokens * I * elem, 8 * tokens * I),
        "down (post-norm)": (down * elem + tokens * I * elem, 2 * down * tokens),
        "final norm": (act, 4 * tokens * D), "LM head": (V * D * elem + act, 2 * V * D * tokens),
        "sampling": (V * 4, 5 * V), "embedding": (act, 0), **_moe_costs(cfg, tokens, elem, experts),
    }


def _moe_costs(cfg: ModelConfig, tokens: int, elem: int, experts: int) -> dict[str, tuple[int, int]]:
    """A mixture of experts' router (E x D), routing (softmax + top-k over E) and experts: `experts` distinct
    ones read (gate, up, down each), k of them run per token."""
    if not cfg.moe:
        return {}
    D, E, k, I = cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.expert_intermediate_size
    act = tokens * D * elem
    return {"router": (E * D * elem + act, 2 * E * D * tokens), "routing": (tokens * E * 4, 5 * tokens * E),
            EXPERTS: (experts * 3 * D * I * elem + act, 2 * 3 * D * I * k * tokens)}


def op_table(cfg: ModelConfig, timer: OpTimer, tokens: int, context: int, elem_bytes: int,
             sampling_s: float | None = None) -> list[OpTime]:
    """Every timed operation of the forward `timer` saw (`tokens` new positions after `context` cached),
    in order, with its bytes and FLOPs; `sampling_s` adds the sampling of the next token."""
    costs = _costs(cfg, tokens, context, elem_bytes)
    rows = [OpTime(layer, op, s, *(_costs(cfg, tokens, context, elem_bytes, timer.experts_read(layer))[op]
                                   if op == EXPERTS else costs[op])) for layer, op, s in timer.segments()]
    if sampling_s is not None:
        rows.append(OpTime(None, "sampling", sampling_s, *costs["sampling"]))
    return rows


def totals(rows: list[OpTime]) -> list[OpTime]:
    """Per operation, summed over the layers, in `ORDER` (`OPS` with a mixture of experts' ops after down)."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for r in rows:
        a = acc[r.op]
        a[0] += r.seconds
        a[1] += r.bytes_read
        a[2] += r.flops
    return [OpTime(None, op, acc[op][0], int(acc[op][1]), int(acc[op][2])) for op in ORDER if op in acc]
