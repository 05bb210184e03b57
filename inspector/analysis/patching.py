"""Activation patching: copy one activation of a clean run into a corrupted run and measure what it restores.

Two prompts of the same token length, an answer token and a wrong token. LD = logit(answer) -
logit(wrong) at the last position; patching point P (resid_pre, attn_out, mlp_out, or a head's z) of
layer L at position p with the clean run's value scores (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt):
1 restores the clean behaviour, 0 changes nothing.

`sweep(...)` scores every layer x position. Batched (the default), it groups the runs by position p and
skips what a patch cannot change. Positions before p stay as the corrupted run computed them (attention
is causal), so the corrupted prompt's keys and values for 0..p-1 are computed once and copied into every
row of a cache, and a forward (`inspector.generation.loop.forward`) feeds only positions p..; blocks
before the patched layer compute the corrupted run again, so a group of consecutive layers starts at
its first one from the corrupted run's residual there (`start`). One row per layer, row r patched at its
layer by an intervention that edits row r only. A group holds at least `MIN_TOKEN_ROWS` rows x positions:
each forward streams every weight once and pays a fixed cost per operation, so on this 2-core CPU
splitting the 30 layers of a 16-token sweep into groups of 4 made it slower (142 s against 86 s for one
group per position, same process, shared machine); with this floor a prompt of up to about 68 tokens
runs one forward per position, and only longer ones skip blocks. Unbatched, each (layer, position) is one forward of
the whole corrupted prompt, one row, from the embedding. `patch_one` scores one point
(a head's z too). `patched_run` takes one point's patched run further through the generation loop
(`loop.greedy`): its score, the next token's top probabilities and a greedy continuation (`PatchedRun`).
The run's own levers (interventions) apply in every run: clean, corrupted and patched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from inspector.analysis.findings import PatchedRun, PatchSweep
from inspector.engine import steps
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.interventions import check_head, check_layer
from inspector.generation.levers import Intervention, Levers, check_interventions
from inspector.generation.sequence import Sequence as Seq

POINTS = ("resid_pre", "attn_out", "mlp_out")  # what a sweep patches; patch_one also takes "z" (one head)
MAX_ROWS = 32  # rows per batched forward
MIN_TOKEN_ROWS = 2048  # a batched forward's rows x positions at least (see the module docstring)


def trace_key(point: str, layer: int) -> str:
    if point == "z":
        return f"blocks.{layer}.attn.hook_z"
    if point not in POINTS:
        raise InputError(f"unknown patching point {point!r}: use one of {', '.join(POINTS)} (or z with a head)")
    return f"blocks.{layer}.hook_{point}"


class _Keep:
    """Records one point at every layer of a one-row forward: {layer: (T, X)}."""

    def __init__(self, names: dict[str, int]) -> None:
        self.names, self.values = names, {}

    def wants(self, name: str) -> bool:
        return name in self.names

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if name in self.names:
            self.values[self.names[name]] = value[0].detach().clone()


def check_prompts(clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int, wrong: int,
                  vocab: int) -> None:
    if not clean_ids or not corrupt_ids:
        raise InputError("patching needs a clean and a corrupted prompt, both non-empty")
    if len(clean_ids) != len(corrupt_ids):
        raise InputError(f"the clean prompt is {len(clean_ids)} tokens and the corrupted one {len(corrupt_ids)}: "
                         "patching needs prompts of the same token length")
    if len(clean_ids) < 2:
        raise InputError("patching needs prompts of at least 2 tokens")
    for name, t in (("answer", answer), ("wrong", wrong)):
        if not 0 <= t < vocab:
            raise InputError(f"the {name} token id must be from 0 to {vocab - 1}, got {t}")
    if answer == wrong:
        raise InputError("the answer and the wrong token are the same token: pick two different ones")


class Baseline:
    """The clean run's activations at one point (every layer) and both runs' logit differences."""

    def __init__(self, model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int,
                 wrong: int, point: str, levers: Levers) -> None:
        cfg = model.config
        check_prompts(clean_ids, corrupt_ids, answer, wrong, cfg.vocab_size)
        check_interventions(levers.interventions, cfg)
        self.model, self.answer, self.wrong, self.point = model, answer, wrong, point
        self.levers = Levers(interventions=levers.interventions)
        self.clean_ids, self.corrupt_ids = list(clean_ids), list(corrupt_ids)
        keep = _Keep({trace_key(point, L): L for L in range(cfg.num_hidden_layers)})
        self.clean_ld = self.ld(loop.forward(model, steps.new_cache(model), [self.clean_ids], self.levers, keep))[0]
        self.clean = keep.values  # {layer: (T, X)}
        self.corrupt_cache = steps.new_cache(model)
        resid = _Keep({f"blocks.{L}.hook_resid_pre": L for L in range(cfg.num_hidden_layers)})
        self.corrupt_ld = self.ld(loop.forward(model, self.corrupt_cache, [self.corrupt_ids], self.levers, resid))[0]
        self.corrupt_resid = resid.values  # {layer: (T, D)} the corrupted run's residual entering each block
        if abs(self.clean_ld - self.corrupt_ld) < 1e-6:
            raise InputError(f"the clean and corrupted prompts give the same logit difference ({self.clean_ld:.4g}): "
                             "nothing to restore; change the prompts or the tokens")

    def ld(self, logits: torch.Tensor) -> list[float]:
        """Logit differences (B,) of next-token logits (B, V)."""
        return (logits[:, self.answer] - logits[:, self.wrong]).tolist()

    def score(self, ld: float) -> float:
        return (ld - self.corrupt_ld) / (self.clean_ld - self.corrupt_ld)

    def prefix_cache(self, rows: int, p: int) -> KVCache:
        """A cache of `rows` rows, each holding the corrupted prompt's keys and values of positions 0..p-1."""
        cache = steps.new_cache(self.model, rows)
        if p == 0:
            return cache
        for L in range(self.model.config.num_hidden_layers):
            k, v = self.corrupt_cache.read(L, 0, p)  # (KV, p, d) each
            cache.update(L, k.expand(rows, *k.shape), v.expand(rows, *v.shape))
        cache.advance(p)
        return cache


def _patch_rows(key: str, rows: list[int], index: int, values: torch.Tensor, cols: slice | None = None
                ) -> Intervention:
    """At `key`, rows `rows` at new-position `index` take `values` (len(rows), X) (only columns `cols`)."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        r = torch.tensor(rows)
        if cols is None:
            out[r, index] = values.to(x.dtype)
        else:
            out[r, index, cols] = values.to(x.dtype)
        return out
    return Intervention(key, fn, f"patch {key}")


@torch.inference_mode()
def sweep(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int, wrong: int,
          point: str = "resid_pre", levers: Levers = loop.NO_LEVERS, *, batched: bool = True,
          layers: Sequence[int] | None = None, max_rows: int = MAX_ROWS, min_token_rows: int = MIN_TOKEN_ROWS,
          pieces: tuple[list[str], list[str]] = ([], [])) -> PatchSweep:
    """The normalized logit difference recovered for every layer x position (see the module docstring)."""
    trace_key(point, 0)  # refuse an unknown point first
    if point not in POINTS:
        raise InputError(f"a sweep patches one of {', '.join(POINTS)}; a head's z is patched with patch_one")
    t0 = time.perf_counter()
    base = Baseline(model, clean_ids, corrupt_ids, answer, wrong, point, levers)
    layers = list(range(model.config.num_hidden_layers)) if layers is None else [check_layer(model.config, L) for L in layers]
    T = len(base.corrupt_ids)
    matrix = [[0.0] * T for _ in layers]
    for p in range(T):
        if batched:
            rows = min(max_rows, max(1, -(-min_token_rows // (T - p))))
            for c0 in range(0, len(layers), rows):
                chunk = layers[c0:c0 + rows]
                patches = tuple(_patch_rows(trace_key(point, L), [r], 0, base.clean[L][p][None])
                                for r, L in enumerate(chunk))
                run = Levers(interventions=base.levers.interventions + patches)
                cache = base.prefix_cache(len(chunk), p)
                x = base.corrupt_resid[chunk[0]][p:]  # (T - p, D)
                start = (chunk[0], x.expand(len(chunk), *x.shape).contiguous())  # (rows, T - p, D)
                lds = base.ld(loop.forward(model, cache, [base.corrupt_ids[p:]] * len(chunk), run, start=start))
                for r, ld in enumerate(lds):
                    matrix[c0 + r][p] = base.score(ld)
        else:
            for i, L in enumerate(layers):
                patch = _patch_rows(trace_key(point, L), [0], p, base.clean[L][p][None])
                run = Levers(interventions=base.levers.interventions + (patch,))
                ld = base.ld(loop.forward(model, steps.new_cache(model), [base.corrupt_ids], run))[0]
                matrix[i][p] = base.score(ld)
    return PatchSweep(point, layers, list(range(T)), list(pieces[0]), list(pieces[1]), matrix, base.clean_ld,
                      base.corrupt_ld, answer, wrong, time.perf_counter() - t0, batched)


def patch_intervention(base: Baseline, layer: int, position: int, head: int | None = None) -> Intervention:
    """The patch as an intervention of a generation: in a forward that covers the whole prompt (a prefill or
    a recompute from position 0), `position` takes the clean value; decode steps pass through."""
    cfg = base.model.config
    L = check_layer(cfg, layer)
    T = len(base.corrupt_ids)
    if not 0 <= int(position) < T:
        raise InputError(f"position must be a whole number from 0 to {T - 1}, got {position}")
    key, value, cols = trace_key(base.point, L), base.clean[L][position][None], None
    if base.point == "z":
        if head is None:
            raise InputError("patching z patches one head: give a head")
        h, d = check_head(cfg, head), cfg.head_dim
        cols = slice(h * d, (h + 1) * d)
        value = value[:, cols]
    inner = _patch_rows(key, [0], position, value, cols)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return inner.fn(x) if x.shape[1] >= T else x

    what = base.point if head is None else f"z of head {L}.{head}"
    return Intervention(key, fn, f"patched {what} at layer {L}, position {position}")


@torch.inference_mode()
def patch_one(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int, wrong: int,
              point: str, layer: int, position: int, head: int | None = None, levers: Levers = loop.NO_LEVERS
              ) -> tuple[float, Intervention]:
    """(normalized logit difference recovered, the patch as an intervention) for one point."""
    base = Baseline(model, clean_ids, corrupt_ids, answer, wrong, point, levers)
    patch = patch_intervention(base, layer, position, head)
    run = Levers(interventions=base.levers.interventions + (patch,))
    ld = base.ld(loop.forward(model, steps.new_cache(model), [base.corrupt_ids], run))[0]
    return base.score(ld), patch


@torch.inference_mode()
def patched_run(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], answer: int, wrong: int,
                point: str, layer: int, position: int, head: int | None = None, levers: Levers = loop.NO_LEVERS, *,
                piece: Callable[[int], str], decode: Callable[[list[int]], str], n: int = 8, top: int = 5
                ) -> PatchedRun:
    """One point's patched run (as `patch_one` scores it), then `n` greedy tokens after the patched prompt
    (no stop token ends them; the context window does)."""
    base = Baseline(model, clean_ids, corrupt_ids, answer, wrong, point, levers)
    patch = patch_intervention(base, layer, position, head)
    run = Levers(interventions=base.levers.interventions + (patch,))
    seq = Seq(base.corrupt_ids, n, model.config.max_position_embeddings)
    decoding = loop.greedy(seq, model, steps.new_cache(model), run)
    logits = next(decoding)  # (V,): the patched prompt's next token, the one patch_one scores
    for _ in decoding:
        pass
    best = logits.softmax(-1).topk(top)
    ids = [int(i) for i in best.indices]
    return PatchedRun(patch.label, layer, position, base.score(base.ld(logits[None])[0]), ids, [piece(i) for i in ids],
                      [float(p) for p in best.values], list(seq.generated_ids), decode(list(seq.generated_ids)))
