"""How many bytes a run holds, from the model's shape alone, before it runs: what the page's admission
checks against its caps (`inspector.ui.admission`).

`kv_bytes(config, positions, elem_bytes)` is the KV cache's own formula (`inspector.engine.kv_cache`);
`allocated_positions(n)` the positions a cache allocates to hold n (whole allocation steps);
`estimated_retained_nbytes` predicts `Session.retained_nbytes` after a prefill and some steps: what a
session keeps per prompt position (KV cache as allocated, post-RoPE queries, residual norms) and per forward
(fp32 logits and their fp16 copy, the logit-lens inputs). Tests hold it to the real number.
"""

from __future__ import annotations

from typing import Any

from inspector.engine.kv_cache import ALLOCATION_STEP, kv_bytes
from inspector.engine.recording import HALF_QUERIES_FROM, NORM_POINTS

__all__ = ["ALLOCATION_STEP", "allocated_positions", "estimated_retained_nbytes", "kv_bytes"]


def allocated_positions(positions: int) -> int:
    """Positions a KV cache allocates to hold `positions`: whole allocation steps."""
    return -(-positions // ALLOCATION_STEP) * ALLOCATION_STEP


def estimated_retained_nbytes(config: Any, elem_bytes: int, n_prompt: int, n_steps: int = 0) -> int:
    """Bytes a session holds after a prefill of `n_prompt` tokens and `n_steps` decode steps."""
    L, H, d = config.num_hidden_layers, config.num_attention_heads, config.head_dim
    positions = n_prompt + n_steps
    kv = kv_bytes(config, allocated_positions(positions), elem_bytes)
    prompt_q_bytes = 2 if n_prompt >= HALF_QUERIES_FROM and elem_bytes == 4 else elem_bytes
    queries = L * H * d * (prompt_q_bytes * n_prompt + elem_bytes * n_steps)
    norms = len(NORM_POINTS) * L * 4 * positions
    forwards = 1 + n_steps
    per_forward = config.vocab_size * (4 + 2) + L * config.hidden_size * elem_bytes  # logits fp32 + fp16, lens input
    return kv + queries + norms + forwards * per_forward
