"""Two models side by side, and the family card of one: the pure model work behind the Models tab.

- `family_card(loaded) -> FamilyCard`: what the model's family adds (`inspector.engine.arch.FAMILY_FEATURES`)
  and each layer's kind, window and RoPE bases.
- `next_tokens(loaded, prompt, chat, top=10, system=None) -> NextTokens`: the prompt as this model tokenizes it
  (its own tokenizer, BOS and chat template) and its next-token distribution after one prefill (a fresh
  cache; nothing is kept). A chat prompt for a model without a chat template is refused by its tokenizer.
"""

from __future__ import annotations

import time

import torch

from inspector.engine import steps as engine
from inspector.engine.arch import FAMILY_FEATURES
from inspector.engine.config import SLIDING
from inspector.errors import InputError
from inspector.generation import loop
from inspector.session.records import FamilyCard, NextTokens, TopToken


def family_card(loaded) -> FamilyCard:
    c = loaded.config
    kinds = ["local" if c.layer_type(i) == SLIDING else "global" for i in range(c.num_hidden_layers)]
    return FamilyCard(loaded.name, c.model_type, list(FAMILY_FEATURES.get(c.model_type, ())), kinds,
                      c.sliding_window if "local" in kinds else None, c.rope_theta, c.rope_local_theta,
                      c.final_logit_softcapping)


@torch.inference_mode()
def next_tokens(loaded, prompt: str, chat: bool, top: int = 10, system: str | None = None) -> NextTokens:
    if not prompt:
        raise InputError("prompt is empty: type some text")
    tok = loaded.tokenizer
    ids = tok.prompt_ids(prompt, chat, system=system)
    context = loaded.config.max_position_embeddings
    if len(ids) >= context:
        raise InputError(f"prompt is {len(ids)} tokens; {loaded.name}'s context window is {context} tokens")
    t0 = time.perf_counter()
    logits = loop.forward(loaded.model, engine.new_cache(loaded.model), [ids])[0].cpu()  # (V,) fp32
    ms = (time.perf_counter() - t0) * 1e3
    probs = torch.softmax(logits, dim=-1)
    best = torch.topk(logits, top)
    rows = [TopToken(int(i), tok.piece(int(i)), float(v), float(probs[i])) for i, v in zip(best.indices, best.values)]
    return NextTokens(loaded.name, [tok.piece(i) for i in ids], ids, rows, ms)
