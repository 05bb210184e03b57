"""Admission: every cap a request must pass, checked before any model work (milliseconds, off the model thread).

A refused request never reaches the model threads, so it neither waits behind other visitors' forwards
nor delays them. `admit_prompt` checks, in order: the prompt's characters (before tokenizing a huge
paste), its tokens after the chat template against `max_prompt_tokens` and the model's context window,
and the memory the session would hold after the prefill against `max_trace_mb`. `admit_max_new` checks
the requested number of new tokens against `max_steps`.

`estimated_retained_nbytes` predicts `Session.retained_nbytes` from the model's shape alone: what a
session keeps per prompt position (KV cache as allocated, post-RoPE queries, residual norms) and per
forward (fp32 logits and their fp16 copy, the logit-lens inputs). Tests hold it to the real number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from inspector.engine.kv_cache import ALLOCATION_STEP as KV_ALLOCATION_STEP
from inspector.engine.recording import HALF_QUERIES_FROM, NORM_POINTS
from inspector.errors import InputError
from inspector.ui.app_model import AppLimits

MAX_CHARS_PER_TOKEN = 32  # a prompt longer than this many characters per allowed token is refused untokenized


@dataclass(frozen=True)
class AdmittedPrompt:
    ids: list[int]
    tokenize_ms: float


def estimated_retained_nbytes(config: Any, elem_bytes: int, n_prompt: int, n_steps: int = 0) -> int:
    """Bytes a session holds after a prefill of `n_prompt` tokens and `n_steps` decode steps."""
    L, H, KV, d = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    positions = n_prompt + n_steps
    capacity = -(-positions // KV_ALLOCATION_STEP) * KV_ALLOCATION_STEP
    kv = 2 * L * KV * d * elem_bytes * capacity
    prompt_q_bytes = 2 if n_prompt >= HALF_QUERIES_FROM and elem_bytes == 4 else elem_bytes
    queries = L * H * d * (prompt_q_bytes * n_prompt + elem_bytes * n_steps)
    norms = len(NORM_POINTS) * L * 4 * positions
    forwards = 1 + n_steps
    per_forward = config.vocab_size * (4 + 2) + L * config.hidden_size * elem_bytes  # logits fp32 + fp16, lens input
    return kv + queries + norms + forwards * per_forward


def admit_max_new(value: Any, limits: AppLimits) -> int:
    """The max-new-tokens control as a positive int within `max_steps`; InputError otherwise."""
    try:
        n = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        raise InputError(f"max new tokens must be a whole number, got {str(value)[:40]!r}") from None
    if n != n or n in (float("inf"), float("-inf")) or n != int(n):
        raise InputError(f"max new tokens must be a whole number, got {value!r}")
    if n <= 0:
        raise InputError(f"max new tokens must be > 0, got {int(n)}")
    if n > limits.max_steps:
        raise InputError(f"max new tokens is capped at {limits.max_steps} here (INSPECTOR_MAX_STEPS)")
    return int(n)


def admit_prompt(loaded: Any, limits: AppLimits, prompt: Any, chat: bool, system: Any) -> AdmittedPrompt:
    """Tokenize the prompt (chat template optional) and check every cap; InputError naming the first one hit."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type something first")
    system = system if isinstance(system, str) and system.strip() and chat else None
    chars = len(prompt) + (len(system) if system else 0)
    max_chars = limits.max_prompt_tokens * MAX_CHARS_PER_TOKEN
    if chars > max_chars:
        raise InputError(f"the prompt is {chars} characters; this server allows {max_chars} "
                         f"({limits.max_prompt_tokens} tokens, INSPECTOR_MAX_PROMPT_TOKENS)")
    t0 = time.perf_counter()
    ids = loaded.tokenizer.prompt_ids(prompt, chat, system)
    tokenize_ms = (time.perf_counter() - t0) * 1e3
    n = len(ids)
    if n > limits.max_prompt_tokens:
        raise InputError(f"the prompt is {n} tokens; this server allows {limits.max_prompt_tokens} "
                         f"(INSPECTOR_MAX_PROMPT_TOKENS)")
    context = loaded.config.max_position_embeddings
    if n >= context:
        raise InputError(f"the prompt is {n} tokens; the model's context window is {context} tokens")
    elem = loaded.model.model.embed_tokens.weight.element_size()
    if estimated_retained_nbytes(loaded.config, elem, n) >= limits.max_trace_mb * 2**20:
        raise InputError(f"this prompt's KV cache and trace would exceed the {limits.max_trace_mb} MB this server "
                         f"allows per session (INSPECTOR_MAX_TRACE_MB): try a shorter prompt")
    return AdmittedPrompt(ids, tokenize_ms)
