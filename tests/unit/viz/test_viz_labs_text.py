"""The labs' sentences that depend on what was run: the KV bytes say what they are for each kind of cache,
and the FlashAttention note computes its numbers from the walk."""

from __future__ import annotations

import numpy as np

from inspector.quant.measurements import FlashWalk
from inspector.units import format_bytes
from inspector.viz.kv_policies import bytes_text, flash_html


def test_kv_bytes_say_what_a_masked_a_packed_and_the_full_cache_hold():
    masked = bytes_text("h2o, budget 32", 300_000, 1_200_000)
    assert "a cache that freed the evicted ones would save 75%" in masked and "keeps their storage" in masked
    packed = bytes_text("int4", 300_000, 1_200_000)
    assert "as packed int4 codes" in packed and "dequantized numbers in fp32" in packed and "evicted" not in packed
    assert bytes_text("full", 1_200_000, 1_200_000) == f"KV cache {format_bytes(1_200_000)}"


def test_flash_note_cites_the_loop_order_and_sizes_this_walks_scores():
    T = 100
    walk = FlashWalk(3, 1, ["a"] * T, [(0, 64), (64, T)], np.zeros((2, T)), np.zeros((2, T)),
                     [np.zeros((T, 64)), np.zeros((T, 36))], np.zeros((2, T)), 1_000_000, 200_000, 150.0, 220.0)
    text = flash_html(walk)
    assert "FlashAttention-2's loop order (Dao 2023" in text and "(5.0x less)" in text
    assert f"one head's score matrix at this length is {format_bytes(T * T * 4)}" in text
    assert "standard 150 ms, tiled 220 ms" in text and "no HBM/SRAM split" not in text
