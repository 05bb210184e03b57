"""The head atlas: what each attention head does, scored on a probe of random tokens repeated once.

The probe (`make_probe`, `model_probe`): K sequences s_b of n token ids drawn uniformly (numpy's PCG64,
`seed`) from the ordinary tokens (every id the tokenizer knows except its special / control tokens),
each fed as prefix + s_b + s_b, the prefix being what a plain prompt starts with (Gemma's BOS; nothing for
SmolLM2). With p = len(prefix) and T = p + 2n positions, the repeat holds positions p+n .. T-1, and
position i there is the same token as position i-n.

Scores, from the engine's own attention pattern A (`blocks.{L}.attn.hook_pattern`, a row per query, summing
to 1) in one forward of the generation loop with a recorder, averaged over the K sequences and over:
- previous-token: A[i, i-1], queries i = 1 .. T-1 (position 0 has no previous token);
- first-token (attention sink): A[i, 0], queries i = 1 .. T-1 (position 0 can only read itself);
- duplicate-token: A[i, i-n], queries i in the repeat (the same token's earlier copy);
- induction: A[i, i-n+1], queries i in the repeat (the token after the earlier copy; Olsson et al. 2022).
A head's score is the attention mass it puts there, 0 to 1. `prompt_scores` gives the first two on a run's
own tokens (the last two need a known repeat). `head_pattern` gives one head's whole pattern on some ids.
`run_scores(session)` / `run_pattern(session, L, h)`: the same on the tokens a session's run has fed (its
prompt and the generated tokens before the newest), in one forward under the run's interventions.

`atlas(model, probe)` runs the K sequences batched (as many rows per forward as keep the recorded patterns
within `PATTERN_BUDGET` bytes) and keeps the result per model and probe for the life of the process (a few
floats per head, and the probe's ids), the `KEPT` probes used last per model; a second call with the same probe
returns it without a forward.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from inspector.analysis.head_findings import ROLES, HeadAtlas, HeadPattern, Probe, PromptScores
from inspector.engine import steps
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.interventions import check_head, check_layer
from inspector.generation.levers import Levers
from inspector.models.loader import LoadedModel
from inspector.session.session import Session
from inspector.validate import SEED, Bound

PROBE_LEN = Bound("probe length", True, 2)  # n: the induction target i-n+1 must differ from i itself
PROBES = Bound("probes", True, 1)
DEFAULT_N, DEFAULT_PROBES, DEFAULT_SEED = 48, 8, 0
PATTERN_BUDGET = 256 * 2**20  # bytes of one layer's (rows, H, T, T) fp32 pattern per forward
KEPT = 16  # atlases kept per model (the probes used last): a server's visitors each try their own probe
_ATLASES: "weakref.WeakKeyDictionary[Transformer, dict[tuple, HeadAtlas]]" = weakref.WeakKeyDictionary()


def check_role(role: str) -> str:
    """`role` as one of ROLES ("previous-token" spelled with a hyphen too); InputError otherwise."""
    name = str(role).strip().replace("-", "_")
    if name not in ROLES:
        raise InputError(f"unknown head role {str(role)[:40]!r}: use one of {', '.join(ROLES)}")
    return name


def make_probe(vocab_size: int, n: object = DEFAULT_N, count: object = DEFAULT_PROBES, seed: object = DEFAULT_SEED,
               exclude: Sequence[int] = (), prefix: Sequence[int] = (), context: int | None = None) -> Probe:
    """`count` sequences of `n` ids drawn uniformly from 0..vocab_size-1 less `exclude`, each as prefix + s + s."""
    n, count, seed = int(PROBE_LEN.parse(n)), int(PROBES.parse(count)), int(SEED.parse(seed))
    prefix = tuple(int(t) for t in prefix)
    if context is not None and len(prefix) + 2 * n > context:
        extra = f" after {len(prefix)} prefix token" if prefix else ""
        raise InputError(f"probe length {n} repeated once is {2 * n + len(prefix)} tokens{extra}; the context window "
                         f"is {context}: use a probe length of at most {(context - len(prefix)) // 2}")
    allowed = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), np.asarray(list(exclude), dtype=np.int64))
    if len(allowed) < 2:
        raise InputError(f"the vocabulary has {len(allowed)} ordinary tokens: a probe needs at least 2")
    seqs = allowed[np.random.default_rng(seed).integers(0, len(allowed), size=(count, n))]  # (K, n)
    pre = np.broadcast_to(np.asarray(prefix, dtype=np.int64), (count, len(prefix)))  # (K, p)
    ids = np.concatenate([pre, seqs, seqs], axis=1)  # (K, p + 2n)
    return Probe(n, count, seed, prefix, ids, vocab_size, vocab_size - len(allowed))


def model_probe(loaded: LoadedModel, n: object = DEFAULT_N, count: object = DEFAULT_PROBES,
                seed: object = DEFAULT_SEED) -> Probe:
    """The probe for a loaded model: its tokenizer's ordinary tokens, its plain-prompt prefix, its context."""
    tok, cfg = loaded.tokenizer, loaded.config
    vocab = min(cfg.vocab_size, tok.vocab_size)
    prefix = (tok.bos_id,) if tok.add_bos else ()
    return make_probe(vocab, n, count, seed, sorted(i for i in tok.special_ids if i < vocab), prefix,
                      cfg.max_position_embeddings)


class PatternScores:
    """A recorder that reads every layer's attention pattern and sums the four scores' terms per head."""

    def __init__(self, num_layers: int, num_heads: int, n: int | None, prefix: int) -> None:
        self.n, self.p = n, prefix
        self.sums = np.zeros((len(ROLES), num_layers, num_heads))  # float64
        self.counts = np.zeros(len(ROLES))  # (row, query) terms per head and role

    def wants(self, name: str) -> bool:
        return name.endswith(".attn.hook_pattern")

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if not self.wants(name):
            return
        layer = int(name.split(".")[1])
        A = value.detach().double()  # (B, H, T, T)
        B, _, T, _ = A.shape
        terms = [torch.diagonal(A, -1, -2, -1),  # (B, H, T-1): query i -> i-1, i = 1..T-1
                 A[:, :, 1:, 0]]  # (B, H, T-1): query i -> 0, i = 1..T-1
        if self.n is not None:
            n, p = self.n, self.p
            terms.append(torch.diagonal(A, -n, -2, -1)[..., p:])  # (B, H, n): entry j is query j+n; from p+n on
            terms.append(torch.diagonal(A, -(n - 1), -2, -1)[..., p + 1:])  # entry j is query j+n-1; from p+n on
        for r, t in enumerate(terms):
            self.sums[r, layer] += t.sum(dim=(0, 2)).cpu().numpy()
            if layer == 0:
                self.counts[r] += B * t.shape[-1]

    def means(self) -> dict[str, np.ndarray]:
        return {ROLES[r]: self.sums[r] / self.counts[r] for r in range(len(ROLES)) if self.counts[r]}


def rows_per_forward(model: Transformer, length: int, budget: int = PATTERN_BUDGET) -> int:
    """How many probe rows of `length` tokens one forward takes so one layer's pattern stays within `budget`."""
    return max(1, budget // (model.config.num_attention_heads * length * length * 4))


@torch.inference_mode()
def score_probe(model: Transformer, probe: Probe, levers: Levers = loop.NO_LEVERS,
                max_rows: int | None = None) -> HeadAtlas:
    """The four scores of every head on `probe` under `levers` (the patterns the model goes on with), now."""
    cfg = model.config
    if probe.length > cfg.max_position_embeddings:
        raise InputError(f"the probe is {probe.length} tokens; the context window is {cfg.max_position_embeddings}")
    rows = max_rows or rows_per_forward(model, probe.length)
    t0 = time.perf_counter()
    rec = PatternScores(cfg.num_hidden_layers, cfg.num_attention_heads, probe.n, len(probe.prefix))
    for b0 in range(0, probe.count, rows):
        chunk = probe.ids[b0:b0 + rows].tolist()
        loop.forward(model, steps.new_cache(model, len(chunk)), chunk, levers, rec)
    return HeadAtlas(probe, rec.means(), time.perf_counter() - t0, min(rows, probe.count))


def atlas(model: Transformer, probe: Probe) -> HeadAtlas:
    """The atlas of `model` on `probe`, computed once per (model, probe) in this process (the `KEPT` used last)."""
    kept = _ATLASES.setdefault(model, {})
    found = kept.pop(probe.key, None) or score_probe(model, probe)
    kept[probe.key] = found  # the newest last
    while len(kept) > KEPT:
        kept.pop(next(iter(kept)))
    return found


def cached(model: Transformer, probe: Probe) -> HeadAtlas | None:
    """The atlas already computed for (model, probe), or None."""
    return _ATLASES.get(model, {}).get(probe.key)


@torch.inference_mode()
def prompt_scores(model: Transformer, ids: Sequence[int], levers: Levers = loop.NO_LEVERS) -> PromptScores:
    """Previous-token and first-token scores of every head on `ids` (one forward under `levers`)."""
    if len(ids) < 2:
        raise InputError(f"the text is {len(ids)} token: a head's scores need at least 2 tokens")
    cfg = model.config
    if len(ids) > cfg.max_position_embeddings:
        raise InputError(f"the text is {len(ids)} tokens; the context window is {cfg.max_position_embeddings}")
    rec = PatternScores(cfg.num_hidden_layers, cfg.num_attention_heads, None, 0)
    loop.forward(model, steps.new_cache(model), [list(ids)], levers, rec)
    return PromptScores(len(ids), rec.means())


class _OnePattern:
    """A recorder that keeps one head's pattern (T, T) of one layer."""

    def __init__(self, layer: int, head: int) -> None:
        self.name, self.head, self.value = f"blocks.{layer}.attn.hook_pattern", head, None

    def wants(self, name: str) -> bool:
        return name == self.name

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name == self.name:
            self.value = value[0, self.head].detach().float().cpu().numpy().copy()


@torch.inference_mode()
def head_pattern(model: Transformer, ids: Sequence[int], layer: int, head: int, pieces: Sequence[str], what: str,
                 levers: Levers = loop.NO_LEVERS, repeat_from: int | None = None) -> HeadPattern:
    """Head `head` of `layer`: its pattern (T, T) on `ids`, from a forward through that layer only."""
    cfg = model.config
    L, h = check_layer(cfg, layer), check_head(cfg, head)
    if not ids:
        raise InputError("no tokens to show a pattern on")
    rec = _OnePattern(L, h)
    loop.forward(model, steps.new_cache(model), [list(ids)], levers, rec, n_layers=L + 1)
    return HeadPattern(L, h, rec.value, list(pieces), what, repeat_from)


def probe_pattern(loaded: LoadedModel, probe: Probe, layer: int, head: int, row: int = 0) -> HeadPattern:
    """A head's pattern on probe sequence `row` (pieces from the model's tokenizer)."""
    if not 0 <= row < probe.count:
        raise InputError(f"probe sequence must be from 0 to {probe.count - 1}, got {row}")
    ids, start = probe.ids[row].tolist(), len(probe.prefix) + probe.n
    return head_pattern(loaded.model, ids, layer, head, loaded.tokenizer.pieces(ids),
                        f"probe sequence {row} (n = {probe.n}, repeated from position {start})", repeat_from=start)


def run_ids(session: Session) -> list[int]:
    """The tokens a session's run has fed so far: its prompt and every generated token but the newest."""
    return list(session.prompt_ids) + list(session.generated_ids[:max(0, len(session.records) - 1)])


def run_levers(session: Session) -> Levers:
    """The run's interventions (one forward from an empty cache: a KV-cache policy evicts nothing in it)."""
    return Levers(interventions=session.own_levers.interventions)


def run_scores(session: Session) -> PromptScores:
    """Previous-token and first-token scores of every head on the run's tokens, under its interventions."""
    if not session.records:
        raise InputError("nothing to score yet: run prefill first")
    return prompt_scores(session.model, run_ids(session), run_levers(session))


def run_pattern(session: Session, layer: int, head: int) -> HeadPattern:
    """A head's pattern on the run's tokens, under its interventions."""
    if not session.records:
        raise InputError("nothing to show yet: run prefill first")
    ids = run_ids(session)
    return head_pattern(session.model, ids, layer, head, session.tokenizer.pieces(ids),
                        f"this run ({len(ids)} tokens)", run_levers(session))
