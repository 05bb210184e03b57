"""Training beside inference: a known text teacher-forced through the engine's model, then one backward pass.

Training runs the same forward as inference, but over a whole text whose next tokens are known, scores
every prediction (cross-entropy), and sends the gradient of the mean loss back through every weight.

- `token_losses(model, ids, pieces)`: one inference forward over all positions (the engine's own
  `inspector.generation.loop.forward` with a fresh KV cache); `losses[t]` = -log p(ids[t + 1] | ids[:t + 1])
  in nats, their mean, and the perplexity exp(mean). Returns (TokenLosses, the KV cache's bytes).
- `training_step(model, ids, pieces)`: the same losses, plus one forward with autograd and one backward of
  the mean loss (what `transformers` computes with `labels=`): the gradient's L2 norm per weight and per
  layer, and memory side by side: inference (weights + this text's KV cache) and one training step
  (weights + activations autograd keeps for the backward + gradients + Adam's two moments). Weights, KV
  cache, activations and gradients are measured from the tensors (saved tensors counted once per storage
  through `torch.autograd.graph.saved_tensors_hooks`, weights excluded); Adam's moments by formula
  (2 x parameters x 4 bytes, fp32). No weight changes.

The model is shared (the web app's sessions all use one): its weights get `requires_grad` only inside
`training_step`, restored in `finally`, and the gradients come from `torch.autograd.grad` (nothing is
written to `.grad`). Callers that share the model run this under its lock (the web app: its model thread).
Gradients need an fp32 model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from inspector.analysis.findings import MemoryPart, TokenLosses, TrainingStep
from inspector.engine import steps
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop

ADAM_MOMENTS = 2  # Adam keeps a first and a second moment per parameter
ADAM_BYTES = 4  # in fp32


def estimated_step_nbytes(config: object, n_params: int, n_tokens: int) -> int:
    """An upper bound, from shapes, on what `training_step` holds beyond the weights while it runs: the fp32
    gradients (one per parameter) and the activations autograd keeps over `n_tokens` tokens — per layer and
    token about 6 hidden-size vectors (norm inputs and outputs, residuals), 4 of the heads' width (q, k, v
    and the heads' output, keys and values repeated for every query head), 4 of the MLP's width (gate, up,
    the activation, its product with up) and one attention row per head; the logits three times (logits,
    their fp32 copy, the softmax). Tests hold it to the measured bytes."""
    c = config
    per_layer = 6 * c.hidden_size + 4 * c.num_attention_heads * c.head_dim + 4 * c.intermediate_size
    per_token = c.num_hidden_layers * (per_layer + c.num_attention_heads * n_tokens) + 3 * c.vocab_size
    return 4 * (n_params + n_tokens * per_token)


def check_text(ids: Sequence[int], context: int, limit: int | None = None) -> None:
    """InputError unless the text has 2 to min(context, limit) tokens (one prediction at least)."""
    most = context if limit is None else min(context, limit)
    if len(ids) < 2:
        raise InputError(f"the text is {len(ids)} token: the loss needs at least 2 tokens (one to predict)")
    if len(ids) > most:
        what = "the model's context window" if most == context else "the most this view teacher-forces"
        raise InputError(f"the text is {len(ids)} tokens; {what} is {most} tokens: shorten it")


def _losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy (T - 1,) of logits (T, V) predicting ids (T,) shifted by one, in fp32."""
    return F.cross_entropy(logits[:-1].float(), ids[1:], reduction="none")


def _record(ids: Sequence[int], pieces: Sequence[str], losses: torch.Tensor) -> TokenLosses:
    mean = float(losses.double().mean())
    return TokenLosses(list(ids), list(pieces), [float(v) for v in losses], mean, math.exp(mean))


@torch.inference_mode()
def token_losses(model: Transformer, ids: Sequence[int], pieces: Sequence[str] | None = None) -> tuple[TokenLosses, int]:
    """Teacher-force `ids` through one inference forward (see the module doc); (losses, KV cache bytes)."""
    check_text(ids, model.config.max_position_embeddings)
    cache = steps.new_cache(model)
    logits = loop.forward(model, cache, [list(ids)], all_positions=True)[0]  # (T, V) fp32
    target = torch.tensor(list(ids), device=logits.device)
    return _record(ids, pieces or [str(i) for i in ids], _losses(logits, target)), cache.nbytes


class _SavedBytes:
    """Counts the bytes of the tensors autograd saves for the backward, once per storage, weights excluded."""

    def __init__(self, exclude: set[int]) -> None:
        self.exclude, self.seen, self.bytes = exclude, set(exclude), 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.seen:
            self.seen.add(storage.data_ptr())
            self.bytes += storage.nbytes()
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t


def _storage_bytes(tensors: Sequence[torch.Tensor]) -> tuple[set[int], int]:
    """(the storages' addresses, their bytes counted once each): stacked weights share one storage."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen.setdefault(s.data_ptr(), s.nbytes())
    return set(seen), sum(seen.values())


def _gradients(model: Transformer, ids: Sequence[int]) -> tuple[dict[str, torch.Tensor], int, float, float]:
    """d(mean loss)/d(weight) per named parameter, the saved activations' bytes, forward and backward seconds."""
    named = list(model.named_parameters())
    flags = [p.requires_grad for _, p in named]
    weight_storages, _ = _storage_bytes([p for _, p in named])
    saved = _SavedBytes(weight_storages)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            for _, p in named:
                p.requires_grad_(True)
            x = torch.tensor([list(ids)], device=model.inv_freq.device)  # (1, T)
            t0 = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                logits = model(x)[0]  # (T, V): no KV cache, the whole text from position 0
                loss = _losses(logits, x[0]).mean()
            t1 = time.perf_counter()
            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
            t2 = time.perf_counter()
    finally:
        for (_, p), flag in zip(named, flags):
            p.requires_grad_(flag)
    out = {name: (torch.zeros_like(p) if g is None else g.detach()) for (name, p), g in zip(named, grads)}
    return out, saved.bytes, t1 - t0, t2 - t1


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else None


def training_step(model: Transformer, ids: Sequence[int], pieces: Sequence[str] | None = None,
                  limit: int | None = None) -> TrainingStep:
    """The losses of `ids`, one backward pass and the memory of both sides (see the module doc);
    `limit` caps the tokens below the context window (InputError past it, before any model work)."""
    check_text(ids, model.config.max_position_embeddings, limit)
    if model.unembed_weight.dtype != torch.float32:
        raise InputError(f"gradients need the fp32 model; this one is {str(model.unembed_weight.dtype).removeprefix('torch.')}")
    losses, kv_bytes = token_losses(model, ids, pieces)
    grads, activation_bytes, fwd, bwd = _gradients(model, ids)
    norms = {name: float(g.double().norm()) for name, g in grads.items()}
    layers = [0.0] * model.config.num_hidden_layers
    for name, n in norms.items():
        layer = _layer_of(name)
        if layer is not None:
            layers[layer] += n * n
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    _, weight_bytes = _storage_bytes(params)
    weights = MemoryPart("weights", weight_bytes, "measured")
    inference = [weights, MemoryPart("KV cache", kv_bytes, "measured", f"{len(ids)} tokens")]
    training = [weights,
                MemoryPart("activations kept for backward", activation_bytes, "measured", f"{len(ids)} tokens"),
                MemoryPart("gradients", sum(g.nbytes for g in grads.values()), "measured", "one per weight"),
                MemoryPart("Adam moments", ADAM_MOMENTS * n_params * ADAM_BYTES, "formula",
                           f"2 x {n_params:,} parameters x 4 bytes")]
    return TrainingStep(losses, norms, [math.sqrt(v) for v in layers], inference, training, fwd, bwd)
