"""A step-through of tiled attention (FlashAttention's forward) for one head of one prefill.

`flash_walk(model, prompt_ids, layer, head, tile)` runs the prompt's prefill once with a recorder that keeps
the layer's rotated queries and keys and its values, then replays that head's attention tile by tile with
`inspector.engine.flash.step_through`: per tile the running max m and sum l of each query row, the tile's
weights exp(s - m), and how far each row's output moved when the tile was folded in (rescaled by the new l).
Beside it: the bytes a GPU kernel would move to and from HBM with and without the T x S score matrix
(`inspector.engine.flash.hbm_bytes`, by formula, fp16 numbers, blocks of 128 query rows) and the measured
prefill time of the whole model on this CPU with each attention path. Returns a `FlashWalk` record.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from inspector.engine import steps
from inspector.engine.flash import TILE, hbm_bytes, step_through
from inspector.engine.model import Transformer, set_attention
from inspector.errors import InputError
from inspector.generation import loop
from inspector.quant.measurements import FlashWalk


class _Keep:
    """Keeps one layer's rotated queries and keys and its values of the forward."""

    def __init__(self, layer: int) -> None:
        self.points = {f"blocks.{layer}.attn.{p}": p for p in ("hook_rot_q", "hook_rot_k", "hook_v")}
        self.seen: dict[str, torch.Tensor] = {}

    def wants(self, name: str) -> bool:
        return name in self.points

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name in self.points:
            self.seen[self.points[name]] = value[0].detach().float().clone()  # (heads, T, d)


def _prefill_ms(model: Transformer, ids: list[int], kind: str) -> float:
    set_attention(model, kind)
    try:
        t0 = time.perf_counter()
        loop.forward(model, steps.new_cache(model), [ids])
        return (time.perf_counter() - t0) * 1e3
    finally:
        set_attention(model, "standard")


@torch.inference_mode()
def flash_walk(model: Transformer, prompt_ids: list[int], layer: int, head: int, piece: Callable[[int], str],
               tile: int = TILE) -> FlashWalk:
    cfg = model.config
    if not 0 <= layer < cfg.num_hidden_layers or not 0 <= head < cfg.num_attention_heads:
        raise InputError(f"layer must be 0..{cfg.num_hidden_layers - 1} and head 0..{cfg.num_attention_heads - 1}")
    if not prompt_ids:
        raise InputError("the prompt is empty: type something first")
    rec = _Keep(layer)
    loop.forward(model, steps.new_cache(model), [prompt_ids], rec=rec)
    q = rec.seen["hook_rot_q"][head]  # (T, d)
    kv = head // cfg.n_rep
    k, v = rec.seen["hook_rot_k"][kv], rec.seen["hook_v"][kv]  # (T, d) each
    walk = step_through(q, k, v, 0, tile)
    outs = [np.zeros_like(walk[0].out)] + [s.out for s in walk]
    change = np.stack([np.linalg.norm(b - a, axis=-1) for a, b in zip(outs, outs[1:])])  # (tiles, T)
    T, d = q.shape
    hbm = hbm_bytes(T, T, d, 2, 128)
    ms_standard = _prefill_ms(model, prompt_ids, "standard")
    ms_tiled = _prefill_ms(model, prompt_ids, "tiled")
    return FlashWalk(layer, head, [piece(t) for t in prompt_ids], [(s.s0, s.s1) for s in walk],
                     np.stack([s.m for s in walk]), np.stack([s.l for s in walk]), [s.weights for s in walk],
                     change.astype(np.float32), hbm["standard"], hbm["tiled"], ms_standard, ms_tiled)
