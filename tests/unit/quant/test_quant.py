"""The quantization layer on tiny random models: packing round trips within each scheme's bound, the
quantized forward against "dequantize, then the fp32 forward", the int8 KV cache against fp32's, and
the fidelity numbers (KL of a model against itself is 0; greedy divergence equals a free run's)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.engine_fixtures import hf_pair
from inspector.engine import steps
from inspector.engine.model import Transformer
from inspector.models.loader import LoadedModel
from inspector.errors import InputError
from inspector.quant import fidelity, packing
from inspector.quant.kv_int8 import Int8KVCache, fp32_bytes_per_position, new_kv_cache
from inspector.quant.model import quantize_loaded, quantize_model, weight_bytes
from inspector.quant.schemes import Scheme, check_shapes, parse_kv, parse_scheme


@pytest.fixture(scope="module")
def tiny():
    _, ours, cfg = hf_pair("llama", tie_word_embeddings=True)
    return ours, cfg


@pytest.fixture(scope="module")
def tiny_untied():
    _, ours, cfg = hf_pair("qwen2")  # separate LM head, q/k/v biases
    return ours, cfg


def test_int8_round_trip_within_half_a_step_per_row():
    w = torch.randn(48, 96) * torch.rand(48, 1)  # rows of different ranges
    w[3] = 0.0  # an all-zero row stays exact
    q, scale = packing.quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (48,)
    err = (packing.dequantize_int8(q, scale) - w).abs()
    assert (err <= scale[:, None] / 2 * (1 + 1e-6)).all()
    assert err[3].max() == 0
    assert q.abs().max() == 127  # each row's largest weight uses the full range


@pytest.mark.parametrize("group", [16, 32, 96])
def test_int4_round_trip_within_half_a_step_per_group(group):
    w = torch.randn(40, 192) * 0.02
    w[:, :group] += 5.0  # one group far from zero: its own zero point
    packed, scale, zero = packing.quantize_int4(w, group)
    assert packed.shape == (40, 96) and packed.dtype == torch.uint8
    assert scale.dtype == zero.dtype == torch.float16 and scale.shape == (40, 192 // group)
    err = (packing.dequantize_int4(packed, scale, zero) - w).abs()
    assert (err <= packing.int4_bound(scale, group) * (1 + 1e-3)).all()


def test_packed_int4_unpacks_to_the_same_values():
    q = torch.randint(0, 16, (7, 64), dtype=torch.uint8)
    packed = packing.pack_int4(q)
    assert packed.shape == (7, 32)
    assert torch.equal(packing.unpack_int4(packed), q)
    assert int(packed[0, 0]) == int(q[0, 0]) | (int(q[0, 1]) << 4)  # low nibble = even column


def test_int4_refuses_a_group_that_does_not_divide():
    with pytest.raises(ValueError, match="divide"):
        packing.quantize_int4(torch.randn(4, 48), 32)


def test_scheme_strings():
    assert parse_scheme("int8") == Scheme("int8")
    assert parse_scheme("INT4") == Scheme("int4", 32)
    assert parse_scheme("int4:128").label == "int4-g128"
    assert parse_scheme(" bf16 ").name == "bf16"
    assert parse_kv(None) == "fp32" and parse_kv("int8") == "int8"
    for bad in ("int5", "int8:32", "int4:0", "int4:7", "int4:x", "", None):
        with pytest.raises(InputError, match="scheme|group") as exc:
            parse_scheme(bad)
        assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="KV"):
        parse_kv("int4")


def test_group_that_does_not_divide_the_model_is_one_line(tiny):
    _, cfg = tiny  # hidden 64, intermediate 128
    check_shapes(parse_scheme("int4:32"), cfg)
    with pytest.raises(InputError, match="does not divide the hidden size") as exc:
        check_shapes(parse_scheme("int4:48"), cfg)
    assert "\n" not in str(exc.value)


# bf16 and the int8 / int4 kernels also round the activations they multiply to bf16: a looser tolerance
@pytest.mark.parametrize("scheme,path,tol", [("int8", "dequant", 1e-5), ("int8", "kernel", 5e-2),
                                             ("int4:32", "dequant", 1e-5), ("int4:16", "dequant", 1e-5),
                                             ("int4:32", "kernel", 5e-2), ("bf16", "dequant", 5e-2)])
@pytest.mark.parametrize("which", ["tiny", "tiny_untied"])
def test_quantized_forward_equals_dequantize_then_fp32_forward(scheme, path, tol, which, request):
    ours, cfg = request.getfixturevalue(which)
    qm = quantize_model(ours, scheme, int8_path=path, int4_path=path)
    ref = Transformer(cfg).eval()
    ref.load_state_dict(qm.dequantized_state(), strict=True)
    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    with torch.no_grad():
        got, want, orig = qm(ids), ref(ids), ours(ids)
    assert (got - want).abs().max() <= tol * want.abs().max()
    assert (got - orig).abs().max() > 0  # it really is quantized


def test_quantized_model_shares_the_fp32_tensors_and_holds_fewer_bytes(tiny):
    ours, _ = tiny
    qm = quantize_model(ours, "int8")
    assert qm.model.norm is ours.model.norm and qm.inv_freq is ours.inv_freq
    assert qm.model.layers[2].input_layernorm.weight is ours.model.layers[2].input_layernorm.weight
    assert weight_bytes(qm) < 0.3 * weight_bytes(ours)
    assert weight_bytes(quantize_model(ours, "int4:32")) < 0.2 * weight_bytes(ours)
    assert ours.model.layers[0].mlp.up_proj.weight.dtype == torch.float32  # the fp32 model is untouched


def test_quantized_model_decodes_with_a_cache_like_the_full_forward(tiny):
    ours, _ = tiny
    qm = quantize_model(ours, "int4:32")
    ids = [5, 9, 17, 3, 44, 8]
    full = qm(torch.tensor([ids]))[0, -1]
    cache = steps.new_cache(qm)
    steps.prefill(qm, ids[:4], cache)
    steps.decode_step(qm, ids[4], cache)
    torch.testing.assert_close(steps.decode_step(qm, ids[5], cache), full, atol=1e-4, rtol=1e-4)


def test_int8_kv_cache_reads_back_within_its_bound_and_counts_its_bytes(tiny):
    ours, cfg = tiny
    cache = Int8KVCache(cfg, batch=2)
    k = torch.randn(2, cfg.num_key_value_heads, 5, cfg.head_dim)
    v = torch.randn_like(k)
    K, V = cache.update(0, k, v, counts=[5, 3])
    cache.advance([5, 3])
    scale = k.abs().amax(-1, keepdim=True) / 127
    assert ((K[:, :, :5] - k).abs()[0] <= scale[0] / 2 * (1 + 1e-5)).all()
    rk, rv = cache.read(0, row=1)
    assert rk.shape == (cfg.num_key_value_heads, 3, cfg.head_dim)
    assert ((rv - v[1, :, :3]).abs() <= v[1, :, :3].abs().amax(-1, keepdim=True) / 254 * (1 + 1e-5)).all()
    per_pos = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.head_dim + 4)
    assert cache.bytes_per_position == per_pos < fp32_bytes_per_position(cfg) / 3
    assert cache.layer_nbytes(0) == 8 * per_pos // cfg.num_hidden_layers
    cache.truncate(2, row=0)
    assert cache.lengths == [2, 3]


def test_int8_kv_cache_decodes_close_to_fp32(tiny):
    ours, _ = tiny
    ids = [5, 9, 17, 3, 44, 8, 21]
    out = {}
    for kv in ("fp32", "int8"):
        cache = new_kv_cache(ours, kv)
        steps.prefill(ours, ids[:3], cache)
        out[kv] = [steps.decode_step(ours, t, cache) for t in ids[3:]]
    assert isinstance(cache, Int8KVCache)
    for a, b in zip(out["fp32"], out["int8"]):
        assert 0 < (a - b).abs().max() < 0.05 * a.abs().max()


def test_kl_of_the_fp32_model_against_itself_is_zero(tiny):
    ours, _ = tiny
    ref = fidelity.reference_pass(ours, [1, 2, 3, 4], 6)
    same = fidelity.forced_pass(ours, [1, 2, 3, 4], ref.tokens)
    rec = fidelity.compare(ref, same, str, scheme="fp32", label="fp32", kv="fp32", prompt_tokens=4,
                           weight_bytes=1, fp32_weight_bytes=1)
    assert rec.kl_max == 0.0 and rec.top1_agreement == 1.0 and rec.first_divergence_step is None
    assert all(x.resid_cos_min > 1 - 1e-12 for x in rec.layers) and len(rec.layers) == 3
    assert rec.positions == 6


def test_kl_against_a_hand_computed_value():
    ref = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    q = torch.log(torch.tensor([[0.25, 0.25, 0.5]]))
    want = 0.5 * math.log(2.0) + 0.25 * math.log(0.5)  # sum p log(p/q); the middle term is 0
    assert abs(float(fidelity.kl_per_step(ref, q)[0]) - want) < 1e-7  # inputs are fp32 logs


def test_first_divergence_is_where_a_free_running_quantized_model_departs(tiny):
    ours, _ = tiny
    qm = quantize_model(ours, "int4:16")
    prompt = [7, 1, 30, 2]
    ref = fidelity.reference_pass(ours, prompt, 12)
    rec = fidelity.compare(ref, fidelity.forced_pass(qm, prompt, ref.tokens), str, scheme="int4:16", label="x",
                           kv="fp32", prompt_tokens=4, weight_bytes=1, fp32_weight_bytes=1)
    free = fidelity.reference_pass(qm, prompt, 12).tokens  # the quantized model's own greedy output
    differs = [i for i, (a, b) in enumerate(zip(ref.tokens, free)) if a != b]
    assert rec.first_divergence_step == (differs[0] if differs else None)
    assert rec.kl_mean > 0


def test_quantize_loaded_keeps_tokenizer_and_refuses_bad_input(tiny):
    ours, cfg = tiny

    loaded = LoadedModel("tiny", "test", cfg, ours, object(), None, "safetensors fp32", 1)
    q = quantize_loaded(loaded, "int8", "int8")
    assert q.scheme == Scheme("int8") and q.kv == "int8" and q.tokenizer is loaded.tokenizer
    assert "int8" in q.source_format
    assert quantize_loaded(loaded, None).model is ours
    with pytest.raises(InputError):
        quantize_loaded(loaded, "int3")
    with pytest.raises(InputError, match="does not divide"):
        quantize_loaded(loaded, "int4:256")
    with pytest.raises(InputError, match="load it in fp32"):
        quantize_model(_bf16_copy(ours, cfg), "int8")


def _bf16_copy(model: Transformer, cfg) -> Transformer:
    copy = Transformer(cfg).eval()
    copy.load_state_dict(model.state_dict())
    return copy.to(torch.bfloat16)


@pytest.mark.parametrize("scheme", ["bf16", "int8", "int4:32", "int4:16"])
@pytest.mark.parametrize("which", ["tiny", "tiny_untied"])
@pytest.mark.parametrize("path", ["dequant", "kernel"])
def test_planned_bytes_equal_the_built_models(scheme, which, path, request):
    from inspector.quant.model import planned_weight_bytes

    ours, _ = request.getfixturevalue(which)
    built = quantize_model(ours, scheme, int8_path=path, int4_path=path)
    assert planned_weight_bytes(ours, parse_scheme(scheme), int4_path=path, int8_path=path) == weight_bytes(built)


def test_int4_kernel_layout_holds_the_same_weights_as_the_packed_one():
    from inspector.quant.linear import Int4Linear

    w = torch.randn(64, 128) * 0.05
    kernel, plain = Int4Linear(w, 32, path="kernel"), Int4Linear(w, 32, path="dequant")
    assert kernel.qweight.nbytes == plain.qweight.nbytes == 64 * 64  # two weights per byte either way
    # the same integers; only the kernel's bf16 scale and zero (8-bit mantissa) differ from the fp16 ones
    step = float(plain.scale.float().max())
    torch.testing.assert_close(kernel.dequantize(), plain.dequantize(), atol=0.1 * step, rtol=0)
    x = torch.randn(3, 128)
    torch.testing.assert_close(kernel(x), x.bfloat16().float() @ kernel.dequantize().t(), atol=2e-2, rtol=2e-2)


def test_quantized_inventory_has_the_bytes_held_and_a_precision_column(tiny):
    from inspector.models.inventory import inventory_from_state
    from inspector.quant.inventory import quant_inventory
    from inspector.viz.inventory import inventory_html

    ours, cfg = tiny
    fp32 = inventory_from_state(ours.state_dict(), tied=True)
    qm = quantize_model(ours, "int8")
    inv = quant_inventory(qm, fp32)
    q = next(e for e in inv.entries if e.name == "model.layers.1.self_attn.q_proj.weight")
    assert (q.dtype, q.precision, q.bytes) == ("int8", "int8 per-channel (bf16 scale)", 64 * 64 + 2 * 64)
    norm = next(e for e in inv.entries if e.name == "model.norm.weight")
    assert norm.precision == "fp32 (shared)" and norm.bytes == 4 * 64
    assert inv.bytes == weight_bytes(qm) - ours.inv_freq.nbytes  # the inventory lists weights, not RoPE's buffer
    assert q.to_json()["precision"] == "int8 per-channel (bf16 scale)" and "precision" not in fp32.entries[0].to_json()
    page = inventory_html(inv.entries, tied=True)
    assert "<th data-col=\"6\" data-num=\"0\">precision</th>" in page and "int8 per-channel" in page
    assert "float32" in inventory_html(fp32.entries, tied=True).split("<tbody>")[-1]  # fp32 model: its dtype
