"""The one generation loop: forward -> logits processors -> sample -> append -> check finish.

Every path that generates goes through here: the session (prefill, decode, branch), the speculative
verifier (a forward over the newest token and k drafts: the same forward with more positions, then the
acceptance rule instead of a plain draw) and the serving scheduler (one forward over many rows, each row
a sequence). None of them runs the model or advances a KV cache on its own.

- `forward(model, cache, feeds, levers, rec)` runs one forward (`inspector.engine.steps.run`: row b of
  `cache` feeds `feeds[b]`), with the levers' interventions applied at their trace points, then the
  levers' KV-cache policy on every row the forward wrote. fp32 logits (B, V) of each row's last token,
  or (B, T, V) with `all_positions`.
- `choose(seq, logits, params, force)` draws the sequence's next token from its newest logits (V,): the
  levers' processors, then the sampling stages (`inspector.engine.sampling.sample`), with the generator
  of `generator_for(params.seed, position)`, the position of the token being drawn. Returns the
  `SampleResult` (every stage's distribution).
- `step(seq, model, cache, params, levers)`: one decode step of one sequence: forward of its newest token,
  choose, append (finish decided by the sequence). Returns (logits, result).
The three levers and their defaults are described in `inspector.generation.levers`.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from inspector.engine import steps
from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.sampling import SampleResult, generator_for, sample
from inspector.engine.trace import Recorder
from inspector.generation.levers import Hooks, Levers
from inspector.generation.sequence import Sequence

NO_LEVERS = Levers()


def forward(model: Transformer, cache: KVCache, feeds: Seq[Seq[int]], levers: Levers = NO_LEVERS,
            rec: Recorder | None = None, *, all_positions: bool = False, n_layers: int | None = None,
            start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
    """One forward with the levers' interventions, then their cache policy (see the module docstring);
    `start` = (L, residual) begins at block L (`inspector.engine.steps.run`)."""
    hooks = Hooks(levers.interventions, rec) if levers.interventions else rec
    logits = steps.run(model, cache, feeds, hooks, all_positions=all_positions, n_layers=n_layers, start=start)
    if levers.evicts:
        apply_policy(levers, cache, n_layers or model.config.num_hidden_layers)
    return logits


def apply_policy(levers: Levers, cache: KVCache, num_layers: int) -> None:
    """Ask the cache policy, layer by layer and row by row, what to evict now; evict it."""
    for row in range(cache.batch):
        for layer in range(num_layers):
            out = levers.cache_policy.evict(layer, cache.held_positions(layer, row))
            if out is not None and len(out):
                cache.evict(layer, row, out)


def choose(seq: Sequence, logits: torch.Tensor, params: SamplingParams, levers: Levers = NO_LEVERS,
           force: int | None = None, index: int | None = None) -> SampleResult:
    """Draw (or force) generated token `index` (default: the next one) from its logits (V,) and put it in
    the sequence; the processors see the ids before it."""
    index = len(seq.generated_ids) if index is None else index
    context = seq.prompt_ids + seq.generated_ids[:index]
    result = sample(logits, params, generator_for(params.seed, len(context)), force, ids=context,
                    processors=levers.processors)
    seq.set_token(index, result.token)
    return result


def step(seq: Sequence, model: Transformer, cache: KVCache, params: SamplingParams, levers: Levers = NO_LEVERS,
         rec: Recorder | None = None) -> tuple[torch.Tensor, SampleResult]:
    """Feed the sequence's newest token, then draw and append the next; (logits (V,), the draw)."""
    logits = forward(model, cache, [[seq.generated_ids[-1]]], levers, rec)[0]
    return logits, choose(seq, logits, params, levers)
