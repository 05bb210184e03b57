"""The precision notes say what the GGUF file holds, tensor by tensor, and the grid claim behind the
Quantization lab's note holds: int4-g32 barely moves Q4_1 weights and really rounds the other types."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.support.tiny import tiny_llama_dir, write_tiny_gguf  # noqa: F401  (fixture)

from inspector.models.loader import load_model
from inspector.quant.packing import dequantize_int4, quantize_int4
from inspector.viz.precision import SAME_GRID_INT4_G32, mix_text, precision_note, quant_lab_note, role, source_mix

# a tied model as a GGUF conversion records it: {HF name: [GGUF type, parameters]}
TYPES = {
    "model.embed_tokens.weight": ["Q8_0", 300],
    "model.layers.0.self_attn.q_proj.weight": ["Q4_1", 400],
    "model.layers.0.mlp.down_proj.weight": ["Q4_1", 290],
    "model.layers.0.input_layernorm.weight": ["F32", 6],
    "model.layers.0.self_attn.q_norm.weight": ["F32", 2],
    "model.norm.weight": ["F32", 2],
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INSPECTOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_roles_of_hf_names():
    assert [role(n) for n in TYPES] == ["token embedding", "block matrices", "block matrices", "norms", "norms",
                                        "norms"]
    assert role("lm_head.weight") == "LM head" and role("model.layers.3.self_attn.q_proj.bias") == "biases"


def test_the_mix_is_computed_from_the_types():
    mix = dict(source_mix(TYPES))
    assert mix["token embedding"] == [("Q8_0", 300, 0.3)] and mix["norms"] == [("F32", 10, 0.01)]
    assert mix["block matrices"] == [("Q4_1", 690, 0.69)]
    assert mix_text(TYPES) == ("token embedding, also the LM head: Q8_0 30.0%; block matrices: Q4_1 69.0%; "
                               "norms: F32 1.0%")
    untied = {**TYPES, "lm_head.weight": ["Q6_K", 1000]}
    assert "token embedding: Q8_0" in mix_text(untied) and "LM head: Q6_K 50.0%" in mix_text(untied)


def test_precision_note_names_each_type_and_only_for_quantized_ggufs():
    note = precision_note("GGUF Q4_1", "float32", TYPES)
    assert 'a Q4_1 GGUF, so "float32" here means that file\'s rounded values held in float32' in note
    assert "token embedding, also the LM head: Q8_0 30.0%" in note and "4-bit-rounded" not in note
    fallback = precision_note("GGUF Q4_K_M", "bfloat16")  # a conversion cached without its tensor types
    assert "Q4_K_M is the file's type as llama.cpp records it" in fallback and "%" not in fallback
    assert precision_note("safetensors fp32", "float32") == "" and precision_note("GGUF F32", "float32", TYPES) == ""
    assert precision_note("GGUF Q4_1, held as int8 in memory", "float32").startswith("Precision: the weights were "
                                                                                     "dequantized from a Q4_1 GGUF")


def test_quant_lab_note_says_what_int4_g32_measures_only_where_the_grid_is_shared():
    note = quant_lab_note("GGUF Q4_1", TYPES)
    assert "int4-g32 puts the Q4_1 matrices (69.0% of the parameters) back on almost the grid" in note
    assert "token embedding, also the LM head: Q8_0, 30.0% of the parameters" in note
    other = {n: (["Q5_0", p] if t == "Q4_1" else [t, p]) for n, (t, p) in TYPES.items()}
    assert "int4-g32 puts" not in quant_lab_note("GGUF Q5_0", other)
    assert "Q5_0 69.0%" in quant_lab_note("GGUF Q5_0", other)
    assert quant_lab_note("safetensors bf16") == "" and "int4-g32" not in quant_lab_note("GGUF Q4_1")


def _int4_g32_error(kind: str) -> float:
    """Relative RMS change int4-g32 makes to a matrix that went through GGUF `kind` (None: fresh weights)."""
    import gguf

    w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    if kind != "fresh":
        qt = gguf.GGMLQuantizationType[kind]
        w = gguf.quants.dequantize(gguf.quants.quantize(w, qt), qt)
    t = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
    packed, scale, zero = quantize_int4(t, 32)
    return float((dequantize_int4(packed, scale, zero) - t).pow(2).mean().sqrt() / t.pow(2).mean().sqrt())


def test_int4_g32_barely_moves_q4_1_weights_and_really_rounds_the_others():
    """The claim behind SAME_GRID_INT4_G32: on Q4_1 values int4-g32's change is under a tenth of what it does
    to fresh weights; on Q4_0 (symmetric), Q5_0 and Q8_0 values it is most of it."""
    fresh = _int4_g32_error("fresh")
    assert fresh > 0.05
    assert all(_int4_g32_error(k) < 0.1 * fresh for k in SAME_GRID_INT4_G32)
    assert all(_int4_g32_error(k) > 0.7 * fresh for k in ("Q4_0", "Q5_0", "Q8_0"))


def test_a_gguf_conversion_records_every_tensors_type(tiny_llama_dir, tmp_path, home):  # noqa: F811
    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny.Q8_0.gguf", qtype="Q8_0")
    got = load_model(path)
    types = got.source_types
    params = dict(got.model.named_parameters())
    assert set(types) == set(params)  # tied: no lm_head tensor in the file, none in the model
    assert all(types[n] == ["Q8_0" if p.dim() == 2 else "F32", p.numel()] for n, p in params.items())
    note = precision_note(got.source_format, "float32", types)
    share = sum(p.numel() for n, p in params.items() if p.dim() == 2 and "embed" not in n) / \
        sum(p.numel() for p in params.values())
    assert f"block matrices: Q8_0 {share:.1%}" in note


def test_a_conversion_cached_without_types_is_converted_again_with_them(tiny_llama_dir, tmp_path, home):  # noqa: F811
    """A directory converted before the types were recorded (an older converter's marker) is converted again,
    once, from the GGUF, and then holds them."""
    import json

    from inspector.models import cache

    path = write_tiny_gguf(tiny_llama_dir, tmp_path / "tiny.Q8_0.gguf", qtype="Q8_0")
    first = load_model(path)
    assert first.source_types and all(t == ["Q8_0", n] or t[0] == "F32" for t, n in
                                      ((v, v[1]) for v in first.source_types.values()))
    marker = first.weights_path / cache.MARKER
    facts = json.loads(marker.read_text())
    marker.write_text(json.dumps({**{k: v for k, v in facts.items() if k != "source_types"},
                                  "converter": cache.CONVERTER - 1}))
    again = load_model(path)
    assert again.source_types == first.source_types
    assert json.loads(marker.read_text())["converter"] == cache.CONVERTER