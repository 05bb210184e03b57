"""`inspector.engine.kv_cache.kv_bytes`, the one KV-cache size formula, against the bytes real caches hold:
the fp32, bf16 and int8 caches (per position and allocated) and a hand count for Llama 3.1 8B."""

from __future__ import annotations

import pytest
import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import ALLOCATION_STEP, KVCache, kv_bytes
from inspector.quant.kv_int8 import SCALE_BYTES, Int8KVCache

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8)


def fill(cache: KVCache, positions: int, batch: int) -> None:
    for layer in range(CFG.num_hidden_layers):
        k = torch.randn(batch, CFG.num_key_value_heads, positions, CFG.head_dim)
        cache.update(layer, k.to(cache.dtype), k.to(cache.dtype))
    cache.advance(positions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3])
def test_kv_bytes_equals_what_a_cache_holds(dtype, batch):
    elem = torch.empty((), dtype=dtype).element_size()
    cache = KVCache(CFG, batch=batch, dtype=dtype)
    assert cache.bytes_per_position == kv_bytes(CFG, 1, elem)
    fill(cache, 300, batch)
    assert cache.nbytes == kv_bytes(CFG, 300, elem, batch)
    assert cache.allocated_nbytes == kv_bytes(CFG, 2 * ALLOCATION_STEP, elem, batch)  # 300 rounds up to 512


def test_kv_bytes_of_an_int8_cache_counts_its_scales():
    cache = Int8KVCache(CFG)
    assert cache.bytes_per_position == kv_bytes(CFG, 1, 1, scale_bytes=SCALE_BYTES)
    fill(cache, 10, 1)
    assert cache.nbytes == kv_bytes(CFG, 10, 1, scale_bytes=SCALE_BYTES)
    assert cache.allocated_nbytes == kv_bytes(CFG, ALLOCATION_STEP, 1, scale_bytes=SCALE_BYTES)


def test_kv_bytes_by_hand():
    # Llama 3.1 8B: 2 (K, V) × 32 layers × 8 KV heads × 128 head_dim × 2 bytes = 131,072 bytes per token
    llama = ModelConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    assert kv_bytes(llama, 1, 2) == 131_072 and kv_bytes(llama, 8192, 2, batch=4) == 4 * 2**30
