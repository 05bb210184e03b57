"""A draw of the sampler as a record the views can keep: `SampleResult` (torch) -> `SampleRecord` (plain).

The engine's `sample()` returns tensors over the whole vocabulary; a session keeps, per step, only the
top candidates by raw logit followed through every stage of the processor chain, named in order (the
chosen token always included). In a family with a final logit soft-cap (Gemma 2) the caller also passes
the logits before the cap (`precap`): the record then names the cap and what it did, as the stage before
the chain (`SampleRecord.softcap_stat`, each candidate's `prob_precap`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.sampling import SampleResult
from inspector.session.records import Candidate, SampleRecord, StageStat, TopToken


def sample_record(result: SampleResult, logits: torch.Tensor, params: SamplingParams,
                  piece: Callable[[int], str], n: int = 20,
                  precap: tuple[float, torch.Tensor] | None = None) -> SampleRecord:
    """The numpy/plain record of a draw: top-n by raw logit (chosen token always included); `precap`:
    (cap, the (V,) logits before the final soft-cap) in a family that has one.

    A draw that ran no stage of the chain (greedy, no processors) and has no soft-cap gives a deferred
    record: its token, params and vocabulary size now, the rest (the token's piece too) built from `result`
    and `logits` (which it holds, unmodified, as the session's forward does) when first read; every other
    draw's is built now, so nothing beyond the (V,) logits is held for later."""
    if precap is None and not result.stage_names:
        out = SampleRecord.__new__(SampleRecord)
        out.__dict__.update(params=params, token_id=result.token, vocab_size=int(logits.numel()), stages=[],
                            softcap=None, softcap_stat=None,
                            _fill=lambda rec: _fill(rec, result, logits, piece, n))
        return out
    return _built(result, logits, params, piece, n, precap)


def _fill(rec: SampleRecord, result: SampleResult, logits: torch.Tensor, piece: Callable[[int], str],
          n: int) -> None:
    """Set a deferred record's remaining fields, as `_built` computes them."""
    built = _built(result, logits, rec.params, piece, n, None)
    rec.__dict__.update({k: v for k, v in built.__dict__.items() if k not in rec.__dict__})


def _built(result: SampleResult, logits: torch.Tensor, params: SamplingParams, piece: Callable[[int], str],
           n: int, precap: tuple[float, torch.Tensor] | None) -> SampleRecord:
    logits = logits.detach().float().reshape(-1)
    top = torch.topk(logits, min(n, logits.shape[0])).indices.tolist()
    if result.token not in top:
        top.append(result.token)
    at = torch.tensor(top, device=logits.device)
    # one gather per distribution, read back as Python numbers (the same floats as indexing one by one)
    values = torch.stack([logits[at], result.probs_raw[at], result.probs_temperature[at], result.probs_final[at],
                          *(probs[at] for _, probs in result.stages)]).tolist()  # (4 + stages, candidates)
    kept = torch.stack([result.kept_top_k[at], result.kept_top_p[at], result.kept_min_p[at]]).tolist()
    cands = [
        Candidate(
            id=i, piece=piece(i), logit=values[0][j], prob_raw=values[1][j], prob_temperature=values[2][j],
            kept_top_k=kept[0][j], kept_top_p=kept[1][j], kept_min_p=kept[2][j], prob_final=values[3][j],
            stage_probs=[row[j] for row in values[4:]],
        )
        for j, i in enumerate(top)
    ]
    out = SampleRecord(params=params, token_id=result.token, token_piece=piece(result.token), candidates=cands,
                       entropy_raw=result.entropy_raw, entropy_final=result.entropy_final,
                       survivors=result.survivors, vocab_size=int(logits.shape[0]),
                       stages=result.stage_names,
                       stage_stats=stage_stats(result, logits, piece))
    if precap is not None:
        add_softcap(out, precap[0], precap[1], logits, result.probs_raw, piece)
    return out


def softcap_name(cap: float) -> str:
    """The soft-cap stage's name, its formula: "soft-cap 30·tanh(x/30)"."""
    return f"soft-cap {cap:g}·tanh(x/{cap:g})"


def add_softcap(record: SampleRecord, cap: float, before: torch.Tensor, after: torch.Tensor,
                probs_after: torch.Tensor, piece: Callable[[int], str], n: int = 5) -> None:
    """Fill `record`'s soft-cap stage: the distribution of the (V,) logits `before` the cap and `after` it
    (`probs_after` = softmax(after)). The cap is monotone, so it removes nothing and reorders nothing: it only
    flattens the top, and "moved" counts the tokens whose logit it changed."""
    before = before.detach().float().reshape(-1)  # (V,)
    probs_before = torch.softmax(before, dim=-1)
    moved = int((before != after).sum())
    record.softcap = float(cap)
    record.softcap_stat = StageStat(softcap_name(cap), int(after.shape[0]), 0, moved, 0.0,
                                    _top(probs_before, before, piece, n), _top(probs_after, after, piece, n))
    for c in record.candidates:
        c.prob_precap = float(probs_before[c.id])


def _top(probs: torch.Tensor, logits: torch.Tensor, piece: Callable[[int], str], n: int) -> list[TopToken]:
    values, ids = torch.topk(probs, min(n, probs.shape[-1]))
    return [TopToken(i, piece(i), float(logits[i]), float(p)) for i, p in zip(ids.tolist(), values.tolist()) if p > 0]


def stage_stats(result: SampleResult, logits: torch.Tensor, piece: Callable[[int], str], n: int = 5
                ) -> list[StageStat]:
    """Per stage of the chain: tokens allowed, removed and moved, probability removed, top-n before and after."""
    out = []
    before_p, before_x = result.probs_raw, logits.float().reshape(-1)
    for (name, after_p), after_x in zip(result.stages, result.stage_logits):
        alive_before, alive_after = torch.isfinite(before_x), torch.isfinite(after_x)
        removed = alive_before & ~alive_after
        moved = alive_after & (after_x != before_x)
        out.append(StageStat(name, int(alive_after.sum()), int(removed.sum()), int(moved.sum()),
                             float(before_p[removed].sum()), _top(before_p, logits, piece, n),
                             _top(after_p, logits, piece, n)))
        before_p, before_x = after_p, after_x
    return out
