"""A draw of the sampler as a record the views can keep: `SampleResult` (torch) -> `SampleRecord` (plain).

The engine's `sample()` returns tensors over the whole vocabulary; a session keeps, per step, only the
top candidates by raw logit followed through every stage of the processor chain, named in order (the
chosen token always included).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.sampling import SampleResult
from inspector.session.records import Candidate, SampleRecord


def sample_record(result: SampleResult, logits: torch.Tensor, params: SamplingParams,
                  piece: Callable[[int], str], n: int = 20) -> SampleRecord:
    """The numpy/plain record of a draw: top-n by raw logit (chosen token always included)."""
    logits = logits.detach().float().reshape(-1)
    top = torch.topk(logits, min(n, logits.shape[0])).indices.tolist()
    if result.token not in top:
        top.append(result.token)
    cands = [
        Candidate(
            id=i, piece=piece(i), logit=float(logits[i]), prob_raw=float(result.probs_raw[i]),
            prob_temperature=float(result.probs_temperature[i]), kept_top_k=bool(result.kept_top_k[i]),
            kept_top_p=bool(result.kept_top_p[i]), kept_min_p=bool(result.kept_min_p[i]),
            prob_final=float(result.probs_final[i]), stage_probs=[float(probs[i]) for _, probs in result.stages],
        )
        for i in top
    ]
    return SampleRecord(params=params, token_id=result.token, token_piece=piece(result.token), candidates=cands,
                        entropy_raw=result.entropy_raw, entropy_final=result.entropy_final,
                        survivors=result.survivors, vocab_size=int(logits.shape[0]),
                        stages=[name for name, _ in result.stages])
