"""Weight products and weight layouts (inspector.engine.linear): `project` equals F.linear for every row
count, layout and dtype; `lay_out_weights` changes how weights are stored, never their values, names or
the model's output; a stacked q/k/v (gate/up) matrix is used only while the module's weights still lie in
it, so weights replaced afterwards are the ones that compute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tests.support.engine_fixtures import tiny_model
from tests.support.tiny import tiny_llama_dir  # noqa: F401  (fixture)

from inspector.engine import steps as engine
from inspector.engine.linear import GATE_UP, QKV, lay_out_weights, project, stacked_weight
from inspector.errors import ModelLoadError
from inspector.models.loader import load_model


@pytest.mark.parametrize("rows", [(1,), (2,), (3, 5), (1, 1), (2, 1, 7)])
@pytest.mark.parametrize("stored", ["out-in", "in-out"])
def test_project_equals_f_linear(rows, stored):
    g = torch.Generator().manual_seed(len(rows))
    w = torch.randn(48, 40, generator=g)
    if stored == "in-out":
        w = w.t().contiguous().t()  # same values, transposed storage
    b = torch.randn(48, generator=g)
    x = torch.randn(*rows, 40, generator=g)
    for bias in (None, b):
        got = project(x, w, bias)
        assert got.shape == (*rows, 48)
        # one row over (in, out) storage with 2+ threads sums K in two halves: fp32 rounding, not exactness
        torch.testing.assert_close(got, F.linear(x, w, bias), rtol=1e-5, atol=1e-5)


def test_project_leaves_other_dtypes_to_f_linear():
    w = torch.randn(16, 8).bfloat16()
    x = torch.randn(3, 8).bfloat16()
    assert torch.equal(project(x, w), F.linear(x, w))


@pytest.mark.parametrize("transposed", [False, True])
def test_layout_keeps_values_names_and_output(transposed):
    model = tiny_model(num_key_value_heads=2, attention_bias=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        expected = model(ids)
    lay_out_weights(model, transposed=transposed)
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.is_contiguous() != transposed  # transposed: a (in, out)-stored view
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert stacked_weight(attn, QKV).shape == (4 * 16 + 2 * 2 * 16, 64)
    assert stacked_weight(attn, QKV, "bias").shape == (4 * 16 + 2 * 2 * 16,)
    assert stacked_weight(mlp, GATE_UP).shape == (2 * 128, 64)
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), expected, rtol=1e-5, atol=1e-5)
        cache = engine.new_cache(model, batch=2)
        engine.step_rows(model, [ids[0].tolist(), ids[1, :4].tolist()], cache)
        got = engine.step_rows(model, [[5], [6]], cache)  # two rows of one token each
        solo = engine.new_cache(model)
        engine.prefill(model, ids[0].tolist(), solo)
        torch.testing.assert_close(got[0], engine.decode_step(model, 5, solo), rtol=1e-5, atol=1e-5)


def test_unstacked_modules_are_not_fused():
    model = tiny_model()
    assert stacked_weight(model.model.layers[0].self_attn, QKV) is None  # separate tensors


def test_weights_replaced_after_layout_are_the_ones_used():
    """load_state_dict(assign=True) swaps parameters for new tensors: the stale stacked buffer must not
    be read, the forward must equal a model built directly on the new weights."""
    model = tiny_model(seed=0)
    lay_out_weights(model, transposed=False)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        model(ids)  # fills the stacked-weight cache
    other = tiny_model(seed=1)
    model.load_state_dict({k: v.clone() for k, v in other.state_dict().items()}, assign=True)
    assert stacked_weight(model.model.layers[0].self_attn, QKV) is None
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), other(ids), rtol=0, atol=0)
    # in-place writes through the views keep the stacked buffer in step
    lay_out_weights(model, transposed=True)
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight.mul_(2)
        other.model.layers[0].self_attn.k_proj.weight.mul_(2)
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), other(ids), rtol=1e-5, atol=1e-5)


def test_a_model_converted_in_place_after_layout_computes_with_its_new_weights():
    """`model.double()` converts every parameter's data under the same objects: the stacked views made
    before point at the old fp32 memory and must not be read."""
    model = tiny_model(seed=0)
    lay_out_weights(model, transposed=True)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        model(ids)  # fills the stacked-weight cache
    model.double()
    reference = tiny_model(seed=0).double()
    with torch.inference_mode():
        got = model(ids)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, reference(ids), rtol=1e-12, atol=1e-12)


def test_load_model_layouts(tiny_llama_dir):
    decode = load_model(tiny_llama_dir)
    batch = load_model(tiny_llama_dir, layout="batch")
    bf16 = load_model(tiny_llama_dir, dtype=torch.bfloat16)
    assert (decode.layout, batch.layout) == ("decode", "batch")
    assert not decode.model.model.layers[0].mlp.down_proj.weight.is_contiguous()  # fp32 decode: (in, out)
    assert batch.model.model.layers[0].mlp.down_proj.weight.is_contiguous()
    assert bf16.model.model.layers[0].mlp.down_proj.weight.is_contiguous()  # bf16 kernels want (out, in)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.inference_mode():
        torch.testing.assert_close(decode.model(ids), batch.model(ids), rtol=1e-5, atol=1e-5)
    with pytest.raises(ModelLoadError, match="layout"):
        load_model(tiny_llama_dir, layout="sideways")


@pytest.mark.parametrize("threads", [1, 2])
def test_one_row_over_transposed_storage_splits_k_only_with_threads(threads, monkeypatch):
    from inspector.engine import linear

    w = torch.randn(64, 32).t().contiguous().t()  # (N, K) stored (K, N)
    x = torch.randn(1, 32)
    calls = []
    monkeypatch.setattr(linear, "_split_k", lambda x, w, real=linear._split_k: calls.append(1) or real(x, w))
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    torch.testing.assert_close(project(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert len(calls) == (threads > 1)


@pytest.mark.parametrize("transposed", [False, True])
def test_layout_puts_every_matrix_in_one_buffer_in_forward_order_with_no_padding(transposed):
    """Every weight matrix lies in one storage, layer by layer in the order a forward reads them (q/k/v, o,
    gate/up, down), and that storage holds exactly the matrices' bytes (memory counts stay true)."""
    model = tiny_model(num_key_value_heads=2)
    lay_out_weights(model, transposed=transposed)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    storages = {p.untyped_storage().data_ptr() for p in matrices}
    assert len(storages) == 1
    assert matrices[0].untyped_storage().nbytes() == sum(p.numel() * p.element_size() for p in matrices)
    layer = model.model.layers[0]
    order = [stacked_weight(layer.self_attn, QKV), layer.self_attn.o_proj.weight, stacked_weight(layer.mlp, GATE_UP),
             layer.mlp.down_proj.weight, model.model.layers[1].self_attn.q_proj.weight]
    addresses = [w.data_ptr() for w in order]
    assert addresses == sorted(addresses)
    assert all(p.untyped_storage().data_ptr() not in storages for p in model.parameters() if p.dim() == 1)
