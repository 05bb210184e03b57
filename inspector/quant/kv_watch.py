"""One generation under a KV-cache policy, with the full cache alongside on the same tokens.

`watch_policy(model, prompt_ids, n, spec, piece, decode, stop_ids)` generates up to n tokens greedily with the
policy (or quantized cache) of `spec` active (`inspector.generation.loop.greedy`; the `Sequence` decides
the finish reason), so the text shows what the policy does to the model; a second, full cache is then fed
the same tokens (`loop.teacher_forced`), so every step's KL(p_full || p_policy) and top-1 agreement compare
the two on the same context. After every forward it records, for every layer and KV head, what each position is:
not written yet, kept (and why: sink, recent, heavy hitter, SnapKV vote) or evicted, with the policy's score
of each kept position (H2O's accumulated attention; the other policies record none). The full cache's own greedy continuation is generated too (the text without the
policy). Returns a `KVPolicyRun` (plain numpy records, `inspector.quant.measurements`).

`forced`: the tokens to feed instead of the greedy ones (a session's generated ids, however they were
sampled); then the run replays that generation, and each step's KL and top-1 agreement compare the two
caches' next-token distributions on exactly the session's tokens.

Context overflow (`on_context_full`): "stop" ends the generation when prompt + generated tokens fill the
model's context window (`KVPolicyRun.finish` "context_full"); "window" goes on past it, the policy run
under a sliding window of 4 sinks and the newest positions when its own policy keeps everything (the full
cache beside it keeps everything, past the trained positions).

Only the masking convention runs here (kept keys at their original positions), so a position's row in
the map is the same token from the first step to the last.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

import numpy as np
import torch

from inspector.engine import steps
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.cache_policies import HeavyHitters, KeepAll, SlidingWindow, SnapKV
from inspector.generation.levers import Levers
from inspector.generation.sequence import Sequence
from inspector.quant.fidelity import kl_per_step
from inspector.quant.kv_eval import CacheSpec
from inspector.quant.measurements import KVPolicyRun, KVPolicyStep

OVERFLOW_SINKS = 4  # sinks of the overflow window (as the session's)
NOT_YET, RECENT, SINK, HEAVY, VOTED, KEPT, EVICTED = range(7)


def _codes(policy: object, cache: KVCache, layer: int, head: int, width: int,
           prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes (width,), scores (width,)) of one layer and KV head now."""
    n = cache.lengths[0]
    codes = np.full(width, NOT_YET, np.uint8)
    scores = np.zeros(width, np.float32)
    codes[:n] = EVICTED
    held = cache.held_positions(layer, 0, head)
    codes[held.numpy()] = KEPT
    if isinstance(policy, SlidingWindow):
        idx = held.numpy()
        codes[idx] = RECENT
        codes[idx[:policy.sinks]] = SINK
    elif isinstance(policy, HeavyHitters):
        acc = policy.scores.get((layer, 0))
        idx = held.numpy()
        codes[idx] = HEAVY
        codes[idx[len(idx) - policy.recent:]] = RECENT
        if acc is not None:
            scores[idx] = acc[head, held].numpy()
    elif isinstance(policy, SnapKV):
        idx = held.numpy()
        voted = idx < prompt_len - min(policy.window, prompt_len)  # before the observation window
        codes[idx[voted]] = VOTED
        codes[idx[~voted]] = RECENT
    return codes, scores


@torch.inference_mode()
def watch_policy(model: Transformer, prompt_ids: list[int], n: int, spec: CacheSpec, piece: Callable[[int], str],
                 decode: Callable[[list[int]], str], stop_ids: Iterable[int] = (),
                 on_context_full: str = "stop", forced: list[int] | None = None) -> KVPolicyRun:
    """Greedy (or `forced`) generation under `spec` with the full cache alongside (see the module docstring)."""
    spec.check()
    if forced is not None:
        n = len(forced)
    if spec.rerotate:
        raise InputError("the kept-positions map shows original positions: choose positions original")
    if n < 1 or not prompt_ids:
        raise InputError("a policy run needs a prompt and at least 1 new token")
    if on_context_full not in ("stop", "window"):
        raise InputError(f"on context full must be stop or window, got {str(on_context_full)[:40]!r}")
    stop, context = frozenset(stop_ids), model.config.max_position_embeddings
    if len(prompt_ids) >= context:
        raise InputError(f"the prompt is {len(prompt_ids)} tokens; the model's context window is {context} tokens")
    levers, cache = spec.levers_and_cache(model)
    if on_context_full == "window" and isinstance(levers.cache_policy, KeepAll) and len(prompt_ids) + n > context:
        levers = Levers(cache_policy=SlidingWindow(context - 1 - OVERFLOW_SINKS, OVERFLOW_SINKS, "overflow window"))
    policy = levers.cache_policy
    seq = Sequence(prompt_ids, n, context if on_context_full == "stop" else sys.maxsize, stop_ids=stop)  # window: no end
    L, KV, width = model.config.num_hidden_layers, model.config.num_key_value_heads, len(prompt_ids) + n
    logits, nbytes, kept, scores = [], [], [], []
    for row in loop.greedy(seq, model, cache, levers, forced=forced):  # after each forward and its token
        per = [[_codes(policy, cache, layer, h, width, len(prompt_ids)) for h in range(KV)] for layer in range(L)]
        kept.append(np.array([[c for c, _ in heads] for heads in per]))  # (L, KV, width)
        scores.append(np.array([[x for _, x in heads] for heads in per]))
        logits.append(row)
        nbytes.append(cache.kept_nbytes)
    tokens = seq.generated_ids
    full = steps.new_cache(model)  # the same tokens, every position kept
    out = []
    for token, row, kept_nbytes, full_row in zip(tokens, logits, nbytes,
                                                 loop.teacher_forced(model, full, prompt_ids, tokens[:-1])):
        kl = float(kl_per_step(full_row[None], row[None])[0])
        top, full_top = int(row.argmax()), int(full_row.argmax())
        out.append(KVPolicyStep(token, piece(token), kl, top == full_top, piece(full_top), kept_nbytes,
                                full.kept_nbytes))
    return KVPolicyRun(label=_label(spec), prompt_len=len(prompt_ids), pieces=[piece(t) for t in seq.ids],
                       steps=out, text=decode(tokens), full_text=decode(_greedy_ids(model, prompt_ids, len(out), stop)),
                       kept=np.stack(kept, axis=2), scores=np.stack(scores, axis=2), finish=seq.finish.value)


def _greedy_ids(model: Transformer, prompt_ids: list[int], n: int, stop: frozenset[int]) -> list[int]:
    """The full cache's own greedy continuation of n tokens (past the context when n takes it there)."""
    seq = Sequence(prompt_ids, n, sys.maxsize, stop_ids=stop)
    for _ in loop.greedy(seq, model, steps.new_cache(model)):
        pass
    return seq.generated_ids


def _label(spec: CacheSpec) -> str:
    if spec.policy in ("full", "int8", "int4"):
        return spec.policy
    sinks = f", {spec.sinks} sinks" if spec.policy == "sinks" else ""
    return f"{spec.policy}, budget {spec.budget}{sinks}"
