"""The summary recorder the engine hands to the model: small per-forward summaries, never T x T maps.

`SummaryRecorder` keeps, for the last `keep` positions of a forward (all new positions, or just the last
one when a step recomputes the whole sequence):
- L2 norms of resid_pre / attn_out / resid_mid / mlp_out / resid_post per layer and position;
- the post-RoPE queries per layer (attention rows are recomputed later from them and the cached keys);
  forwards of `HALF_QUERIES_FROM` positions or more keep them in fp16 (a 2,048-token prompt on a
  30-layer, 9-head model: 71 MB instead of 142; attention weights then agree to ~1e-3);
- the last position's resid_post per layer (the logit lens input).
Everything else (scores, patterns, MLP activations) is ignored, so recording costs a few small
reductions per layer. Values stay torch tensors until `finish()` stacks them into numpy arrays once.
"""

from __future__ import annotations

import numpy as np
import torch

NORM_POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
HALF_QUERIES_FROM = 512  # positions in one forward from which queries are stored in fp16


class SummaryRecorder:
    def __init__(self, num_layers: int, keep: int | None = None) -> None:
        self.num_layers = num_layers
        self.keep = keep  # None: every position of the forward; n: only the last n
        self.norms: dict[str, list[torch.Tensor | None]] = {p: [None] * num_layers for p in NORM_POINTS}
        self.rot_q: torch.Tensor | None = None  # (num_layers, H, n, d), allocated at the first layer
        self.last_resid: list[torch.Tensor | None] = [None] * num_layers  # (D,) each
        # trace name -> (layer, point) for the points kept; every other name is ignored by one dict miss.
        self._wanted = {f"blocks.{i}.hook_{p}": (i, p) for i in range(num_layers) for p in NORM_POINTS}
        self._wanted.update({f"blocks.{i}.attn.hook_rot_q": (i, "rot_q") for i in range(num_layers)})

    def __call__(self, name: str, value: torch.Tensor) -> None:
        hit = self._wanted.get(name)
        if hit is None:
            return
        layer, point = hit
        if point == "rot_q":
            q = value[0] if self.keep is None else value[0, :, -self.keep:]  # (H, n, d)
            if self.rot_q is None:  # one buffer, filled layer by layer: no stack-time copy of a long prompt
                dtype = torch.float16 if q.shape[1] >= HALF_QUERIES_FROM and q.dtype == torch.float32 else q.dtype
                self.rot_q = q.new_empty((self.num_layers, *q.shape), dtype=dtype)
            self.rot_q[layer].copy_(q)
            return
        x = value[0] if self.keep is None else value[0, -self.keep:]  # (n, D)
        self.norms[point][layer] = torch.linalg.vector_norm(x.detach().float(), dim=-1)  # (n,)
        if point == "resid_post":
            self.last_resid[layer] = value[0, -1].detach().clone()

    def norm_arrays(self) -> dict[str, np.ndarray]:
        """{point: (num_layers, n) float32} for every norm point."""
        return {p: torch.stack(v).numpy().astype(np.float32) for p, v in self.norms.items()}

    def queries(self) -> torch.Tensor:
        """(num_layers, H, n, d) post-RoPE queries in the model's dtype (fp16 for long fp32 forwards)."""
        return self.rot_q

    def lens_inputs(self) -> torch.Tensor:
        """(num_layers, D): the last position's residual after each layer."""
        return torch.stack(self.last_resid)


class FullRecorder:
    """Keeps every trace point's full tensor (tests and debugging only: memory grows with T x T)."""

    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, value: torch.Tensor) -> None:
        self.values[name] = value.detach().clone()
