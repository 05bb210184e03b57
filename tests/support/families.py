"""The model families the parity tests build beside llama and qwen2 (tests/support/engine_fixtures.py's
`hf_pair` takes these as config overrides): each family's own features on a tiny config, a sliding window
shorter than every prompt."""

from __future__ import annotations


WINDOW = 8  # shorter than every prompt below
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    "qwen3": dict(head_dim=16),
    "mistral": dict(head_dim=16, sliding_window=WINDOW),
    "phi3": dict(**SPECIAL),
    "phi3-window": dict(sliding_window=WINDOW, **SPECIAL),
    "gemma2": dict(head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=24, **SPECIAL),
    "gemma2-tied": dict(head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16, tie_word_embeddings=True,
                        attn_logit_softcapping=5.0, final_logit_softcapping=2.0, **SPECIAL),
    "gemma3_text": dict(head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16, **SPECIAL,
                        layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
    "gemma3_text-tied": dict(head_dim=32, num_key_value_heads=1, sliding_window=WINDOW, query_pre_attn_scalar=32,
                             tie_word_embeddings=True, rope_local_base_freq=100.0, **SPECIAL),
}
