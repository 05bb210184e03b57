"""Beam search on the generation loop, the `transformers` algorithm (`GenerationMixin._beam_search`).

`beam_search(model, prompt_ids, num_beams, max_new_tokens, ...) -> BeamRecord`. The B = num_beams beams are
the rows of one `KVCache(batch=B)`; every forward is `loop.forward` (so interventions and a cache policy
apply) and after each step `cache.reorder` moves each surviving beam's keys and values to its new row.

Per step, as `transformers` does it: log-softmax of each beam's logits, then the levers' processors on
those log-probabilities (with the beam's own ids), plus the beam's running score; the best
K = max(2, 1 + number of EOS ids) x B of the B x V continuations are the candidates. A candidate that ends
with EOS or reaches the length limit is a finished hypothesis (when among the first B candidates), scored
logprob / generated_length ** length_penalty and kept if among the B best finished; the best B of the
others are the live beams. The first step starts from one beam (the others at -1e9). Stopping follows the
`transformers` defaults: `early_stopping=False` stops once no live beam's score divided by the current
length could beat the worst of B finished hypotheses (`True`: as soon as B hypotheses are finished).
The output is the best finished hypothesis; every finished one is in the record with its score. Its
tokens appended to a `Sequence` give the record's finish reason (EOS, max new tokens or the context).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.engine.processors import run_chain
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.levers import Levers
from inspector.generation.beam_tree import DROPPED, FINISHED, RUNNING, BeamHypothesis, BeamNode, BeamRecord
from inspector.generation.sequence import Sequence

MAX_BEAMS = 16
NEG = -1.0e9  # `transformers`' score for an impossible beam


def beam_search(model: Transformer, prompt_ids: Sequence[int], num_beams: int, max_new_tokens: int, *,
                eos_ids: Sequence[int] = (), length_penalty: float = 1.0, early_stopping: bool = False,
                levers: Levers = loop.NO_LEVERS, piece: Callable[[int], str] = str,
                decode: Callable[[list[int]], str] | None = None) -> BeamRecord:
    """Beam search from `prompt_ids` (see the module docstring); the record of every step and hypothesis."""
    B = num_beams
    if not 1 <= B <= MAX_BEAMS:
        raise InputError(f"num-beams must be a whole number from 1 to {MAX_BEAMS}, got {B}")
    prompt = list(prompt_ids)
    context = model.config.max_position_embeddings
    if len(prompt) >= context:
        raise InputError(f"prompt is {len(prompt)} tokens; the context window is {context} tokens")
    max_length = min(len(prompt) + max_new_tokens, context)
    eos = set(eos_ids)
    K = max(2, 1 + len(eos)) * B
    top_b = torch.arange(K) < B  # only the first B candidates may finish (`top_num_beam_mask`)
    rec = BeamRecord(B, length_penalty, early_stopping, prompt)
    w = model.model.embed_tokens.weight
    cache = KVCache(model.config, batch=B, dtype=w.dtype, device=w.device)

    running = [prompt[:] for _ in range(B)]
    running_nodes = [-1] * B
    running_scores = torch.full((B,), NEG)
    running_scores[0] = 0.0
    finished_scores = torch.full((B,), NEG)
    finished_seqs: list[list[int] | None] = [None] * B
    finished_nodes = [-1] * B
    finished_lp = [0.0] * B
    is_finished = torch.zeros(B, dtype=torch.bool)
    improvable = True
    cur_len = len(prompt)
    logits = loop.forward(model, cache, [prompt] * B, levers)  # (B, V): each row the same prompt
    while True:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        processed = torch.stack([_process(levers, running[b], log_probs[b]) for b in range(B)])  # (B, V)
        V = processed.shape[-1]
        acc = (processed + running_scores[:, None]).reshape(-1)  # (B * V,)
        cand_lp, cand_idx = torch.topk(acc, k=K)
        src, tok = (cand_idx // V).tolist(), (cand_idx % V).tolist()
        hits = torch.tensor([t in eos or cur_len + 1 >= max_length for t in tok])
        nodes = [BeamNode(len(rec.steps) * K + i, running_nodes[s], cur_len - len(prompt), t, piece(t),
                          float(cand_lp[i]), DROPPED, i) for i, (s, t) in enumerate(zip(src, tok))]

        keep_lp = cand_lp + hits.float() * NEG
        keep = torch.topk(keep_lp, k=B)[1].tolist()
        for i in keep:
            if not hits[i]:
                nodes[i].status = RUNNING
        # finished hypotheses: the best B of the old ones and this step's finishing candidates
        score = cand_lp / ((cur_len + 1 - len(prompt)) ** length_penalty)
        score = score + float(bool(is_finished.all()) and early_stopping) * NEG
        score = score + float(not improvable) * NEG
        score = score + (~(hits & top_b)).float() * NEG
        merged = torch.cat([finished_scores, score])
        chosen = torch.topk(merged, k=B)[1].tolist()
        new_seqs, new_nodes, new_lp = [], [], []
        for j in chosen:
            if j < B:
                new_seqs.append(finished_seqs[j]); new_nodes.append(finished_nodes[j]); new_lp.append(finished_lp[j])
            else:
                i = j - B
                new_seqs.append(running[src[i]] + [tok[i]]); new_nodes.append(nodes[i].id)
                new_lp.append(float(cand_lp[i]))
                if bool(hits[i] & top_b[i]) and float(score[i]) > NEG / 2:
                    nodes[i].status = FINISHED
        is_finished = torch.cat([is_finished, hits & top_b])[chosen]
        finished_scores = merged[chosen]
        finished_seqs, finished_nodes, finished_lp = new_seqs, new_nodes, new_lp
        rec.steps.append(nodes)

        running = [running[src[i]] + [tok[i]] for i in keep]
        running_nodes = [nodes[i].id for i in keep]
        running_scores = keep_lp[keep]
        cache.reorder([src[i] for i in keep])
        cur_len += 1
        if improvable:  # `transformers`' early-stop heuristic: can a live beam still beat the worst finished?
            best_running = running_scores[0] / ((cur_len - len(prompt)) ** length_penalty)
            worst = torch.where(is_finished, finished_scores.min(), torch.tensor(NEG))
            improvable = bool((best_running > worst).any())
        open_beam = not (bool(is_finished.all()) and early_stopping)
        if not (improvable and open_beam and not bool(hits.all())):
            break
        logits = loop.forward(model, cache, [[seq[-1]] for seq in running], levers)

    for seq, node, lp, s, done in zip(finished_seqs, finished_nodes, finished_lp, finished_scores.tolist(),
                                      is_finished.tolist()):
        if done and seq is not None:
            gen = seq[len(prompt):]
            rec.hypotheses.append(BeamHypothesis(node, gen, decode(gen) if decode else "", lp, s))
    best = Sequence(prompt, max_new_tokens, context, stop_ids=eos)  # the best hypothesis decides the finish
    for token in rec.hypotheses[0].token_ids if rec.hypotheses else []:
        best.append(token)
    rec.finish = best.finish.value if best.finish is not None else ""
    return rec


def _process(levers: Levers, ids: list[int], log_probs: torch.Tensor) -> torch.Tensor:
    """The levers' processors on one beam's log-probabilities (V,), as `transformers` runs them in beam search."""
    staged = run_chain(levers.processors, ids, log_probs)
    return staged[-1][1] if staged else log_probs
