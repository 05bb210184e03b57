"""The generation loop run by hand (`generate`: prefill, then steps, cached or recomputed), a fixed prompt of
ids, greedy sampling, and transformers' greedy generate as the reference (`hf_greedy`)."""

from __future__ import annotations

import torch

from inspector.engine.config import SamplingParams
from inspector.engine.steps import new_cache
from inspector.generation import loop
from inspector.generation.levers import Levers
from inspector.generation.sequence import Sequence


GREEDY = SamplingParams()
PROMPT = [5, 17, 99, 3, 42, 7, 250, 11, 64, 8, 120, 33]


def generate(model, prompt: list[int], n: int, levers: Levers = loop.NO_LEVERS, params: SamplingParams = GREEDY,
             cached: bool = True) -> tuple[list[int], list[torch.Tensor]]:
    """The loop by hand: prefill, then n - 1 steps (cached, or each step recomputed from position 0)."""
    seq = Sequence(prompt, n, model.config.max_position_embeddings)
    cache = new_cache(model)
    logits = loop.forward(model, cache, [prompt], levers)[0]
    all_logits = [logits]
    loop.choose(seq, logits, params, levers)
    while seq.finish is None:
        if cached:
            logits = loop.step(seq, model, cache, params, levers)[0]
        else:
            logits = loop.forward(model, new_cache(model), [seq.ids], levers)[0]
            loop.choose(seq, logits, params, levers)
        all_logits.append(logits)
    return seq.generated_ids, all_logits


def hf_greedy(hf, prompt: list[int], n: int, **kwargs) -> list[int]:
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                      pad_token_id=0, **kwargs)
    return out[0, len(prompt):].tolist()
