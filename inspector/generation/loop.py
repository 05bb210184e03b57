"""The one generation loop: forward -> logits processors -> sample -> append -> check finish.

Every path that generates goes through here: the session (prefill, decode, branch), the speculative
verifier (a forward over the newest token and k drafts: the same forward with more positions, then the
acceptance rule instead of a plain draw), the serving scheduler (one forward over many rows, each row
a sequence), beam search, and the analyses that decode (quantization fidelity and its speed, the KV-policy
watch, KV-cache evaluation, a patched run's continuation). None of them runs the model or advances a KV
cache on its own (tests/unit/generation/test_one_loop.py checks the calls).

- `forward(model, cache, feeds, levers, rec)` runs one forward (`inspector.engine.steps.forward`: row b of
  `cache` feeds `feeds[b]`), with the levers' interventions applied at their trace points, then the
  levers' KV-cache policy on every row the forward wrote (`apply_policy`: masked per layer or KV head,
  or compacted with re-rotated keys; a policy that observes attention is shown each row's pattern of
  this forward first, by a recorder that sees what the model used, after the interventions). fp32
  logits (B, V) of each row's last token, or (B, T, V) with `all_positions`.
- `choose(seq, logits, params, force)` draws the sequence's next token from its newest logits (V,): the
  levers' processors, then the sampling stages (`inspector.engine.sampling.sample`), with the generator
  of `generator_for(params.seed, position)`, the position of the token being drawn. Returns the
  `SampleResult` (every stage's distribution).
- `step(seq, model, cache, params, levers)`: one decode step of one sequence: forward of its newest token,
  choose, append (finish decided by the sequence). Returns (logits, result). `prefill(...)`: the same for
  token 1, from a forward of the whole prompt into an empty cache.
- `greedy(seq, model, cache, levers)`: greedy decoding of a sequence until it finishes (the `Sequence`
  decides: stop id, max new tokens, context), yielding each token's logits (V,) once the token is
  appended; `forced` puts given tokens instead of the argmax (teacher forcing, finish still decided by the
  sequence). `teacher_forced(model, cache, prompt_ids, tokens, levers)`: the prompt, then the given tokens
  one decode forward each, yielding the logits after the prompt and after each token. Both feed one token
  per forward after the prompt, as a free-running decode does, so their numbers are a decode's.
The three levers and their defaults are described in `inspector.generation.levers`.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence as Seq

import torch

from inspector.engine import steps
from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.layers import apply_rope, rope_cos_sin, signed_sin
from inspector.engine.sampling import SampleResult, final_probs, generator_for, sample
from inspector.engine.trace import Recorder, edits, wants
from inspector.generation.levers import Hooks, Levers, Place
from inspector.generation.sequence import Sequence

NO_LEVERS = Levers()
GREEDY = SamplingParams()  # temperature 0: the argmax after the levers' processors


def forward(model: Transformer, cache: KVCache, feeds: Seq[Seq[int]], levers: Levers = NO_LEVERS,
            rec: Recorder | None = None, *, all_positions: bool = False, n_layers: int | None = None,
            start: tuple[int, torch.Tensor] | None = None, step: int | None = None) -> torch.Tensor:
    """One forward with the levers' interventions, then their cache policy (see the module docstring);
    `start` = (L, residual) begins at block L (`inspector.engine.steps.forward`); `step` is the generation's step
    this forward is, told to interventions that see their place (`levers.Place`)."""
    policy = levers.cache_policy
    if getattr(policy, "observes", False):
        rec = Observer(policy, list(cache.lengths), [len(f) for f in feeds], model.config.num_key_value_heads, rec)
    hooks = Hooks(levers.interventions, rec, Place(step, cache.lengths[0])) if levers.interventions else rec
    logits = steps.forward(model, cache, feeds, hooks, all_positions=all_positions, n_layers=n_layers, start=start)
    if levers.evicts:
        apply_policy(levers, cache, n_layers or model.config.num_hidden_layers, model)
    return logits


class Observer:
    """A recorder that shows each row's attention pattern of this forward to the cache policy, then passes
    every point on to an inner recorder (or none)."""

    def __init__(self, policy: object, starts: list[int], counts: list[int], kv_heads: int,
                 rec: Recorder | None) -> None:
        self.policy, self.starts, self.counts, self.kv_heads, self.rec = policy, starts, counts, kv_heads, rec

    def wants(self, name: str) -> bool:
        return name.endswith(".attn.hook_pattern") or wants(self.rec, name)

    def edits(self, name: str) -> bool:
        return edits(self.rec, name)

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor | None:
        is_pattern = name.endswith(".attn.hook_pattern")
        out = None
        if self.rec is not None and (not is_pattern or wants(self.rec, name)):
            out = self.rec(name, value)
        if is_pattern:
            layer = int(name.split(".")[1])
            seen = value if out is None else out
            B, H, _, _ = seen.shape
            for b in range(B):
                s, t = self.starts[b], self.counts[b]
                row = seen[b, :, :t, :s + t].float()  # (H, T, S): this row's real queries over its keys
                self.policy.observe(layer, b, row.reshape(self.kv_heads, H // self.kv_heads, t, s + t), s)
        return out


def apply_policy(levers: Levers, cache: KVCache, num_layers: int, model: Transformer | None = None) -> None:
    """Ask the cache policy what to evict now, row by row: compact the row with re-rotated keys
    (`rerotate`), or mask per layer, per KV head (`per_head`) or for all heads."""
    policy = levers.cache_policy
    for row in range(cache.batch):
        if getattr(policy, "rerotate", False):
            held = cache.held_positions(0, row)
            out = policy.evict(0, held)
            if out is not None and len(out):
                if model is None:
                    raise ValueError("re-rotating a compacted cache needs the model's rotary frequencies")
                cache.compact(row, held[~torch.isin(held, out)], rerotator(model))
            continue
        for layer in range(num_layers):
            if getattr(policy, "per_head", False):
                held_by_head = [cache.held_positions(layer, row, h) for h in range(cache.kv_heads)]
                for h, out in enumerate(policy.evict_heads(layer, row, held_by_head)):
                    if out is not None and len(out):
                        cache.evict(layer, row, out, head=h)
                continue
            out = policy.evict(layer, cache.held_positions(layer, row))
            if out is not None and len(out):
                cache.evict(layer, row, out)


def rerotator(model: Transformer):
    """`rotate(k (KV, n, d), delta (n,)) -> k` turned by delta positions with the model's RoPE (rotations
    compose: a key rotated at position p, turned by delta, is the key rotated at p + delta)."""
    def rotate(k: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        cos, sin = rope_cos_sin(model.inv_freq, delta, k.dtype)  # (n, d) each
        return apply_rope(k, cos, signed_sin(sin))
    return rotate


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


def prefill(seq: Sequence, model: Transformer, cache: KVCache, params: SamplingParams, levers: Levers = NO_LEVERS,
            rec: Recorder | None = None) -> tuple[torch.Tensor, SampleResult]:
    """Feed the sequence's prompt (the cache holds nothing of it yet), then draw and append token 1."""
    logits = forward(model, cache, [seq.prompt_ids], levers, rec)[0]
    return logits, choose(seq, logits, params, levers)


def greedy(seq: Sequence, model: Transformer, cache: KVCache, levers: Levers = NO_LEVERS,
           rec: Recorder | None = None, *, forced: Seq[int] | None = None) -> Iterator[torch.Tensor]:
    """Greedy decoding until the sequence finishes: a forward of the prompt (no token generated yet) or of the
    newest token, then the argmax (or `forced[k]` for generated token k) appended; yields those logits (V,)."""
    while seq.finish is None:
        k = len(seq.generated_ids)
        feed = seq.prompt_ids if k == 0 else [seq.generated_ids[-1]]
        logits = forward(model, cache, [feed], levers, rec)[0]
        if forced is None:  # the token `choose` draws at temperature 0, without building every distribution
            seq.append(int(final_probs(logits, GREEDY, seq.ids, levers.processors).argmax()))
        else:
            seq.append(forced[k])
        yield logits


def teacher_forced(model: Transformer, cache: KVCache, prompt_ids: Seq[int], tokens: Seq[int],
                   levers: Levers = NO_LEVERS, rec: Recorder | None = None) -> Iterator[torch.Tensor]:
    """The prompt, then each of `tokens` in its own forward; yields len(tokens) + 1 logits (V,): the k-th
    predicts the token after prompt + tokens[:k]."""
    yield forward(model, cache, [list(prompt_ids)], levers, rec)[0]
    for t in tokens:
        yield forward(model, cache, [[t]], levers, rec)[0]
