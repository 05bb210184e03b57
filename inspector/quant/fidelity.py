"""Fidelity of a quantized model against the fp32 model, teacher-forced on the same tokens.

1. `reference_pass(fp32, prompt_ids, n)`: the fp32 model's greedy continuation of n tokens (stopping after
   an end token), with its next-token logits and last-position residual stream at every step
   (`inspector.generation.loop.greedy`).
2. `forced_pass(model, prompt_ids, tokens, kv)`: the other model fed the same prompt and the same tokens
   (prefill, then one decode step per token, through a KV cache of precision `kv`: `loop.teacher_forced`),
   recording the same.
3. `compare(...) -> FidelityRecord`: per step KL(p_fp32 || p_quant) and whether the argmaxes agree, per
   layer the cosine of the two residual streams after the block (min and mean over the steps), and the
   first step at which free-running greedy output diverges.

Why that last number needs no third run: up to the first step where the quantized argmax differs from the
fp32 token, a free-running greedy quantized model has been fed exactly the fp32 tokens, so its forwards are
the teacher-forced ones (same cache path, same operations); its output first differs at that step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from inspector.engine.model import Transformer
from inspector.generation import loop
from inspector.generation.sequence import Sequence
from inspector.quant.kv_int8 import new_kv_cache
from inspector.quant.measurements import FidelityRecord, LayerFidelity, StepFidelity, TopTokens

TOP = 10  # tokens kept per distribution for the side-by-side view


class ResidRecorder:
    """Keeps each block's residual stream (after the block) at the forward's last position."""

    def __init__(self) -> None:
        self.rows: list[torch.Tensor] = []

    def wants(self, name: str) -> bool:
        return name.endswith("hook_resid_post")

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name.endswith("hook_resid_post"):
            self.rows.append(value[0, -1].float().clone())  # (D,)

    def take(self) -> torch.Tensor:
        out, self.rows = torch.stack(self.rows), []
        return out  # (layers, D)


@dataclass
class Pass:
    """One model's forwards over a sequence: step k predicts the token after prompt + tokens[:k]."""

    tokens: list[int]
    logits: torch.Tensor  # (n, V) fp32
    resid: torch.Tensor  # (n, layers, D) fp32


@torch.inference_mode()
def reference_pass(fp32: Transformer, prompt_ids: list[int], n: int, stop_ids: Iterable[int] = ()) -> Pass:
    """The fp32 model's greedy continuation (n tokens, or fewer when it emits a stop token or fills the
    context window), through the generation loop (`loop.greedy`)."""
    seq = Sequence(prompt_ids, n, fp32.config.max_position_embeddings, stop_ids=stop_ids)
    cache, rec = new_kv_cache(fp32, "fp32"), ResidRecorder()
    logits, resid = [], []
    for row in loop.greedy(seq, fp32, cache, rec=rec):
        logits.append(row)
        resid.append(rec.take())
    return Pass(list(seq.generated_ids), torch.stack(logits), torch.stack(resid))


@torch.inference_mode()
def forced_pass(model: Transformer, prompt_ids: list[int], tokens: list[int], kv: str = "fp32") -> Pass:
    """`model` fed the prompt, then `tokens[:-1]` one decode step at a time through a `kv` cache
    (`loop.teacher_forced`)."""
    cache, rec = new_kv_cache(model, kv), ResidRecorder()
    logits, resid = [], []
    for row in loop.teacher_forced(model, cache, prompt_ids, tokens[:-1], rec=rec):
        logits.append(row)
        resid.append(rec.take())
    return Pass(list(tokens), torch.stack(logits), torch.stack(resid))


def kl_per_step(ref_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_ref || p_q) in nats per row of (n, V) logits, computed in float64; exactly 0 for equal rows."""
    lp = torch.log_softmax(ref_logits.double(), dim=-1)
    lq = torch.log_softmax(q_logits.double(), dim=-1)
    return (lp.exp() * (lp - lq)).sum(dim=-1).clamp_(min=0.0)  # (n,): rounding can dip below 0


def resid_cosine(ref: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(n, layers, D) twice -> (n, layers) cosine similarity, in float64."""
    return torch.nn.functional.cosine_similarity(ref.double(), q.double(), dim=-1)


def first_divergence(tokens: list[int], q_logits: torch.Tensor) -> int | None:
    """First step whose greedy token differs from the forced one, or None."""
    hits = (q_logits.argmax(dim=-1) != torch.tensor(tokens)).nonzero()
    return int(hits[0, 0]) if len(hits) else None


def _top(logits: torch.Tensor, piece: Callable[[int], str]) -> TopTokens:
    probs = torch.softmax(logits.double(), dim=-1)
    p, ids = probs.topk(TOP)
    return TopTokens([int(i) for i in ids], [piece(int(i)) for i in ids], [float(x) for x in p])


def compare(ref: Pass, q: Pass, piece: Callable[[int], str], *, scheme: str, label: str, kv: str,
            prompt_tokens: int, weight_bytes: int, fp32_weight_bytes: int) -> FidelityRecord:
    """The fidelity record of `q` against `ref` (same tokens) — see the module doc."""
    kl = kl_per_step(ref.logits, q.logits)
    agree = q.logits.argmax(dim=-1) == torch.tensor(ref.tokens)
    cos = resid_cosine(ref.resid, q.resid)  # (n, layers)
    step_rows = [StepFidelity(k, t, piece(t), float(kl[k]), bool(agree[k]), _top(ref.logits[k], piece),
                              _top(q.logits[k], piece)) for k, t in enumerate(ref.tokens)]
    layers = [LayerFidelity(i, float(cos[:, i].min()), float(cos[:, i].mean())) for i in range(cos.shape[1])]
    return FidelityRecord(scheme, label, kv, prompt_tokens, step_rows, layers, float(kl.mean()), float(kl.max()),
                          float(agree.double().mean()), first_divergence(ref.tokens, q.logits), weight_bytes,
                          fp32_weight_bytes)
