"""Recorders the engine hands to the model (see `inspector.engine.trace` for the protocol).

`SummaryRecorder` keeps small per-forward summaries of one row (`row`, default 0), for the last `keep`
positions of the forward (all new positions, or just the last one when a step recomputes the whole
sequence), and never asks for the (T, S) attention maps:
- L2 norms of resid_pre / attn_out / resid_mid / mlp_out / resid_post per layer and position;
- the post-RoPE queries per layer (attention rows are recomputed later from them and the cached keys);
  forwards of `HALF_QUERIES_FROM` positions or more keep them in fp16 (a 2,048-token prompt on a
  30-layer, 9-head model: 71 MB instead of 142; attention weights then agree to ~1e-3);
- the last position's resid_post per layer (the logit lens input, kept on the model's device);
- families with post-norms (Gemma's sandwich block) also emit what attention and the MLP made before their
  post-norm (`hook_attn_out_raw`, `hook_mlp_out_raw`): their L2 norms are kept beside the others
  (`post_norm_arrays()`, empty for other families); a family with a final logit soft-cap emits the logits
  before it (`unembed.hook_logits_raw`): the last position's row is kept in fp32 (`raw_logits()`, else None);
- a mixture of experts' routing in every layer (`routing_arrays()`, None for a dense model): the experts each
  position went to (int32, best first), their weights (fp32) and the softmax of the router logits over all
  experts (fp32; fp16 from `HALF_QUERIES_FROM` positions on, as the queries).
Norms and queries land on the CPU whatever the model's device (the views read them).
A short forward (a decode step: at most `DEFER_MAX_POSITIONS` positions) only keeps references while it
runs and reduces every layer at once when the results are first read (a few ops per forward instead of
a dozen per layer); a long one reduces layer by layer, so it never holds a layer's activations for long.
Results: `norm_arrays()`, `queries()`, `lens_inputs()`, `post_norm_arrays()`, `raw_logits()`, `routing_arrays()`.

`ExpertUsage` counts, per layer, the distinct experts a forward's real tokens went to (the expert weights a
mixture-of-experts forward reads); `FullRecorder` keeps a copy of every trace point's full tensor, the
attention maps included (tests and debugging: memory grows with T x S).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

NORM_POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
POST_NORM_POINTS = ("attn_out_raw", "mlp_out_raw")  # before the post-norms, in families that have them
RAW_LOGITS = "unembed.hook_logits_raw"  # logits before the final soft-cap, in families that have one
HALF_QUERIES_FROM = 512  # positions in one forward from which queries are stored in fp16
DEFER_MAX_POSITIONS = 16  # forwards up to this many positions are reduced once, after the forward
ROUTING_POINTS = ("router_logits", "expert_ids", "expert_weights")  # mlp.hook_* of a mixture of experts


@functools.lru_cache(maxsize=8)
def _wanted(num_layers: int) -> dict[str, tuple[int, str]]:
    """Trace name -> (layer, point) of every point a `SummaryRecorder` keeps (built once per depth; read only)."""
    wanted = {f"blocks.{i}.hook_{p}": (i, p) for i in range(num_layers) for p in NORM_POINTS}
    wanted.update({f"blocks.{i}.attn.hook_rot_q": (i, "rot_q") for i in range(num_layers)})
    wanted.update({f"blocks.{i}.hook_{p}": (i, p) for i in range(num_layers) for p in POST_NORM_POINTS})
    wanted[RAW_LOGITS] = (-1, "logits_raw")
    wanted.update({f"blocks.{i}.mlp.hook_{p}": (i, p) for i in range(num_layers) for p in ROUTING_POINTS})
    return wanted


class SummaryRecorder:
    def __init__(self, num_layers: int, keep: int | None = None, row: int = 0) -> None:
        self.num_layers = num_layers
        self.keep = keep  # None: every position of the forward; n: only the last n
        self.row = row
        self._defer: bool | None = None  # decided by the forward's length at its first trace point
        self._held: dict[str, list[torch.Tensor | None]] = {
            p: [None] * num_layers for p in (*NORM_POINTS, *POST_NORM_POINTS, "rot_q")}
        self._post: dict[str, list[torch.Tensor]] = {}  # post-norm point -> (n,) norms per layer, when emitted
        self._raw_logits: torch.Tensor | None = None  # (V,) fp32 on the CPU
        # (5, n) per layer, NORM_POINTS order; after a short forward's one reduction, the (L, 5, n) tensor itself
        self._norms: list[torch.Tensor | None] | torch.Tensor = [None] * num_layers
        self._rot_q: torch.Tensor | None = None  # (num_layers, H, n, d)
        self._last_resid: list[torch.Tensor | None] | torch.Tensor = [None] * num_layers  # (D,) each, or (L, D)
        self._done = False
        # trace name -> (layer, point) for the points kept; every other name is ignored by one dict miss
        self._wanted = _wanted(num_layers)
        self._routing: dict[str, list[torch.Tensor | None]] = {p: [None] * num_layers for p in ROUTING_POINTS}

    def wants(self, name: str) -> bool:
        return name in self._wanted

    def __call__(self, name: str, value: torch.Tensor) -> None:
        hit = self._wanted.get(name)
        if hit is None:
            return
        layer, point = hit
        if self._defer and point in self._held:  # a short forward's point: keep the reference (the common case)
            self._held[point][layer] = value
            return
        if name == RAW_LOGITS:  # (B, T or 1, V): this row's last position
            self._raw_logits = value[self.row, -1].detach().float().cpu()
            return
        if point in ROUTING_POINTS:  # this row's kept positions, a reference (the model never modifies it)
            self._routing[point][layer] = self._rows(value, positions_dim=1).detach()  # (n, E) or (n, k)
            return
        if self._defer is None:
            self._defer = value.shape[-2 if point == "rot_q" else 1] <= DEFER_MAX_POSITIONS
        if self._defer:
            self._held[point][layer] = value  # a reference: the model never modifies a recorded tensor
        elif point == "rot_q":
            self._store_queries(layer, self._rows(value, positions_dim=2))
        elif point in POST_NORM_POINTS:
            x = self._rows(value, positions_dim=1)  # (n, D)
            self._post.setdefault(point, [None] * self.num_layers)[layer] = (
                torch.linalg.vector_norm(x.detach().float(), dim=-1).cpu())  # (n,)
        else:
            x = self._rows(value, positions_dim=1)  # (n, D)
            self._held[point][layer] = torch.linalg.vector_norm(x.detach().float(), dim=-1).cpu()  # (n,)
            if point == "resid_post":
                self._norms[layer] = torch.stack([self._held[p][layer] for p in NORM_POINTS])  # (5, n)
                self._last_resid[layer] = value[self.row, -1].detach().clone()
                for p in NORM_POINTS:
                    self._held[p][layer] = None

    def _rows(self, value: torch.Tensor, positions_dim: int) -> torch.Tensor:
        """This recorder's row of `value` (batch first), cut to the kept positions (dim `positions_dim`)."""
        x = value[self.row]
        if self.keep is None:
            return x
        T = x.shape[positions_dim - 1]
        return x.narrow(positions_dim - 1, T - self.keep, self.keep)

    def _store_queries(self, layer: int, q: torch.Tensor) -> None:
        """Copy one layer's (H, n, d) queries into the (num_layers, H, n, d) buffer (fp16 for long fp32 forwards)."""
        if self._rot_q is None:  # one buffer, filled layer by layer: no stack-time copy of a long prompt
            dtype = torch.float16 if q.shape[1] >= HALF_QUERIES_FROM and q.dtype == torch.float32 else q.dtype
            self._rot_q = q.new_empty((self.num_layers, *q.shape), dtype=dtype, device="cpu")  # views read it
        self._rot_q[layer].copy_(q)

    def _finish(self) -> None:
        """Reduce what a short forward left as references: every layer in one stack and one norm."""
        if self._done:
            return
        self._done = True
        if not self._defer:
            return
        held = self._held
        x = torch.stack([held[p][i] for i in range(self.num_layers) for p in NORM_POINTS])  # (L*5, B, T, D)
        x = self._rows(x.transpose(0, 1), positions_dim=2)  # (L*5, n, D)
        norms = torch.linalg.vector_norm(x.detach().float(), dim=-1).cpu()  # (L*5, n)
        self._norms = norms.view(self.num_layers, len(NORM_POINTS), -1)  # (L, 5, n): stacked already
        self._last_resid = x.view(self.num_layers, len(NORM_POINTS), *x.shape[1:])[:, -1, -1].clone()  # (L, D)
        q = torch.stack(held["rot_q"])  # (L, B, H, T, d)
        self._rot_q = self._rows(q.transpose(0, 1), positions_dim=3).contiguous().cpu()  # (L, H, n, d)
        if held["attn_out_raw"][0] is not None:  # a family with post-norms emitted them
            x = torch.stack([held[p][i] for i in range(self.num_layers) for p in POST_NORM_POINTS])  # (L*2, B, T, D)
            x = self._rows(x.transpose(0, 1), positions_dim=2)  # (L*2, n, D)
            post = torch.linalg.vector_norm(x.detach().float(), dim=-1).cpu().view(self.num_layers, 2, -1)  # (L, 2, n)
            self._post = {p: list(post[:, j]) for j, p in enumerate(POST_NORM_POINTS)}
        self._held = {}

    def norm_arrays(self) -> dict[str, np.ndarray]:
        """{point: (num_layers, n) float32} for every norm point."""
        self._finish()
        norms = self._norms if isinstance(self._norms, torch.Tensor) else torch.stack(self._norms)  # (L, 5, n)
        norms = norms.numpy().astype(np.float32)
        return {p: norms[:, j] for j, p in enumerate(NORM_POINTS)}

    def queries(self) -> torch.Tensor:
        """(num_layers, H, n, d) post-RoPE queries in the model's dtype (fp16 for long fp32 forwards)."""
        self._finish()
        return self._rot_q

    def post_norm_arrays(self) -> dict[str, np.ndarray]:
        """{point: (num_layers, n) float32} for `POST_NORM_POINTS` when the family has post-norms, else {}."""
        self._finish()
        return {p: torch.stack(v).numpy().astype(np.float32) for p, v in self._post.items()}  # (L, n) each

    def raw_logits(self) -> torch.Tensor | None:
        """(V,) fp32 logits of the last position before the final soft-cap; None without a soft-cap."""
        return self._raw_logits

    def routing_arrays(self) -> dict[str, np.ndarray] | None:
        """{"expert_ids": (num_layers, n, k) int32, "expert_weights": (num_layers, n, k) float32,
        "router_probs": (num_layers, n, E)} of a mixture-of-experts forward; None when no layer routed."""
        held = self._routing
        if any(v is None for p in ROUTING_POINTS for v in held[p]):
            return None
        logits = torch.stack(held["router_logits"]).float()  # (L, n, E)
        probs = torch.softmax(logits, dim=-1).cpu()
        if probs.shape[1] >= HALF_QUERIES_FROM:
            probs = probs.half()
        return {"expert_ids": torch.stack(held["expert_ids"]).cpu().numpy().astype(np.int32),
                "expert_weights": torch.stack(held["expert_weights"]).float().cpu().numpy(),
                "router_probs": probs.numpy()}

    def lens_inputs(self) -> torch.Tensor:
        """(num_layers, D): the last position's residual after each layer."""
        self._finish()
        last = self._last_resid
        return last if isinstance(last, torch.Tensor) else torch.stack(last)  # (L, D)


class ExpertUsage:
    """Per layer, the distinct experts the real tokens of one forward went to (`mlp.hook_expert_ids`).

    `counts[b]` real tokens lead row b (the rest of the row is padding, whose routing is left out); None: all
    of every row. Asks for nothing else."""

    def __init__(self, num_layers: int, counts: list[int] | None = None) -> None:
        self.counts = counts
        self._names = {f"blocks.{i}.mlp.hook_expert_ids": i for i in range(num_layers)}
        self.chosen: list[set[int]] = [set() for _ in range(num_layers)]

    def wants(self, name: str) -> bool:
        return name in self._names

    def __call__(self, name: str, value: torch.Tensor) -> None:
        layer = self._names.get(name)
        if layer is None:
            return
        rows = value if self.counts is None else [value[b, :n] for b, n in enumerate(self.counts)]  # (T, k) each
        self.chosen[layer].update(int(e) for row in rows for e in row.flatten().tolist())

    def distinct(self) -> list[int]:
        """Experts read per layer."""
        return [len(s) for s in self.chosen]


class FullRecorder:
    """Keeps every trace point's full tensor, attention maps included (tests and debugging only)."""

    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}

    def wants(self, name: str) -> bool:
        return True

    def __call__(self, name: str, value: torch.Tensor) -> None:
        self.values[name] = value.detach().clone()
