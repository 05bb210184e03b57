"""Activation patching and direct logit attribution on a tiny model, with transformers as the reference
where one exists (the patched run made there by a forward hook; the logit the parts must sum to)."""

from __future__ import annotations

import pytest
import torch

from inspector.analysis import attribution, patching
from inspector.analysis.findings import commitment_layer
from inspector.errors import InputError
from inspector.generation import interventions as ivs
from inspector.generation.levers import Levers
from tests.support.engine_fixtures import hf_pair

CLEAN = [5, 17, 99, 3, 42, 7, 250, 11, 64, 8]
DIFF_AT = 4
CORRUPT = CLEAN[:DIFF_AT] + [143] + CLEAN[DIFF_AT + 1:]


@pytest.fixture(scope="module")
def pair():
    return hf_pair("llama", layout="decode")


@pytest.fixture(scope="module")
def tokens(pair):
    """An answer and a wrong token the two prompts disagree on."""
    _, ours, _ = pair
    with torch.no_grad():
        a = ours(torch.tensor([CLEAN]))[0, -1]
        b = ours(torch.tensor([CORRUPT]))[0, -1]
    diff = a - b
    return int(diff.argmax()), int(diff.argmin())


@pytest.mark.parametrize("point", patching.POINTS)
def test_batched_sweep_equals_one_run_per_cell(pair, tokens, point):
    _, ours, _ = pair
    batched = patching.sweep(ours, CLEAN, CORRUPT, *tokens, point, max_rows=2)
    single = patching.sweep(ours, CLEAN, CORRUPT, *tokens, point, batched=False)
    assert batched.layers == single.layers == [0, 1, 2] and batched.positions == list(range(len(CLEAN)))
    for row_b, row_s in zip(batched.matrix, single.matrix):
        assert row_b == pytest.approx(row_s, abs=1e-5)


def test_resid_pre_at_layer_0_recovers_1_where_prompts_differ_and_0_elsewhere(pair, tokens):
    _, ours, _ = pair
    s = patching.sweep(ours, CLEAN, CORRUPT, *tokens, "resid_pre")
    row = s.matrix[0]
    assert row[DIFF_AT] == pytest.approx(1.0, abs=1e-5)
    assert all(abs(v) <= 1e-5 for p, v in enumerate(row) if p != DIFF_AT)
    assert all(abs(v) <= 1e-5 for v in s.matrix[1][:DIFF_AT])  # positions before the difference hold the same


def test_a_patched_head_equals_transformers_with_the_clean_value_hooked_in(pair, tokens):
    hf, ours, cfg = pair
    L, h, d, p = 1, 3, cfg.head_dim, 7
    answer, wrong = tokens
    score, _ = patching.patch_one(ours, CLEAN, CORRUPT, answer, wrong, "z", L, p, head=h)
    seen = {}
    o_proj = hf.model.layers[L].self_attn.o_proj
    handle = o_proj.register_forward_pre_hook(lambda m, a: seen.setdefault("z", a[0].clone()))
    with torch.no_grad():
        clean = hf(torch.tensor([CLEAN])).logits[0, -1]
    handle.remove()

    def patch(m, args):
        x = args[0].clone()
        x[0, p, h * d:(h + 1) * d] = seen["z"][0, p, h * d:(h + 1) * d]
        return (x,)

    handle = o_proj.register_forward_pre_hook(patch)
    with torch.no_grad():
        patched = hf(torch.tensor([CORRUPT])).logits[0, -1]
    handle.remove()
    with torch.no_grad():
        corrupt = hf(torch.tensor([CORRUPT])).logits[0, -1]
    ld = [float(x[answer] - x[wrong]) for x in (clean, corrupt, patched)]
    assert score == pytest.approx((ld[2] - ld[1]) / (ld[0] - ld[1]), abs=1e-4)


@pytest.mark.parametrize("call,message", [
    (lambda m, t: patching.sweep(m, CLEAN, CLEAN[:-1], *t), "the clean prompt is 10 tokens and the corrupted one 9"),
    (lambda m, t: patching.sweep(m, CLEAN, CORRUPT, *t, "resid_post"), "unknown patching point 'resid_post'"),
    (lambda m, t: patching.sweep(m, CLEAN, CORRUPT, t[0], t[0]), "the same token"),
    (lambda m, t: patching.sweep(m, CLEAN, CORRUPT, 300, t[1]), "answer token id must be from 0 to 299"),
    (lambda m, t: patching.sweep(m, CLEAN, CLEAN, *t), "give the same logit difference"),
    (lambda m, t: patching.patch_one(m, CLEAN, CORRUPT, *t, "z", 1, 2), "give a head"),
    (lambda m, t: patching.patch_one(m, CLEAN, CORRUPT, *t, "resid_pre", 1, 10), "position must be a whole number from 0 to 9"),
])
def test_bad_patching_input_is_one_line(pair, tokens, call, message):
    _, ours, _ = pair
    with pytest.raises(InputError) as info:
        call(ours, tokens)
    assert message in str(info.value)


@pytest.mark.parametrize("levers", [
    lambda m: Levers(),
    lambda m: Levers(interventions=ivs.head(m.config, 1, 2, "zero")),
    lambda m: Levers(interventions=ivs.steer(m.config, 2, torch.ones(m.config.hidden_size), 0.3)
                     + ivs.component(m.config, "attn_out", 0, "scale", factor=0.5)),
], ids=["plain", "head-off", "steer+attn-scaled"])
def test_attribution_parts_sum_to_the_logit(pair, levers):
    hf, ours, _ = pair
    lv = levers(ours)
    a = attribution.attribute(ours, CLEAN, levers=lv)
    assert a.total == pytest.approx(a.logit, abs=1e-5 * max(1.0, abs(a.logit)))
    with torch.no_grad():
        want = ours(torch.tensor([CLEAN]))[0, -1] if not lv.interventions else None
    if want is not None:
        assert a.token_id == int(want.argmax())
        with torch.no_grad():
            assert a.logit == pytest.approx(float(hf(torch.tensor([CLEAN])).logits[0, -1, a.token_id]), abs=1e-4)
    if lv.interventions and lv.interventions[0].label == "head 1.2 off":
        assert a.layers[1].heads[2] == 0.0
        assert a.other == pytest.approx(0.0, abs=1e-5)


def test_attribution_of_a_head_is_what_ablating_it_removes_in_the_last_layer(pair):
    """In the last layer nothing downstream reads a head's output, so (with the norm's scale frozen) zeroing
    the head moves the logit by its part once the changed rms is undone."""
    _, ours, cfg = pair
    L, h = cfg.num_hidden_layers - 1, 1
    a = attribution.attribute(ours, CLEAN)
    b = attribution.attribute(ours, CLEAN, a.token_id, Levers(interventions=ivs.head(cfg, L, h, "zero")))
    assert b.layers[L].heads[h] == 0.0
    for i in range(L):  # earlier layers are untouched; only the frozen scale changes
        ratio = [x / y for x, y in zip(b.layers[i].heads, a.layers[i].heads) if abs(y) > 1e-3]
        assert max(ratio) == pytest.approx(min(ratio), rel=1e-4)


def test_commitment_layer():
    assert commitment_layer([1, 2, 3, 3]) == 2
    assert commitment_layer([3, 2, 3, 3]) == 2
    assert commitment_layer([3, 3, 3]) == 0
    assert commitment_layer([1, 2, 3]) == 2


def test_a_forward_started_at_a_block_equals_the_whole_forward(pair):
    from inspector.engine.steps import new_cache
    from inspector.generation import loop

    _, ours, _ = pair
    seen = {}

    def rec(name, value):
        if name == "blocks.2.hook_resid_pre":
            seen["x"] = value.clone()

    whole = loop.forward(ours, new_cache(ours), [CLEAN], rec=rec)
    started = loop.forward(ours, new_cache(ours), [CLEAN], start=(2, seen["x"]))
    assert torch.allclose(whole, started, atol=1e-6)


class LensRows:
    """A stand-in model whose LM head is the identity (a residual row is its own logits), counting the rows it
    unembeds per call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def unembed(self, resid: torch.Tensor) -> torch.Tensor:
        self.calls.append(resid.shape[0])
        return resid.clone()


def test_the_commitment_found_from_the_top_equals_the_whole_lens_and_reads_fewer_rows():
    from inspector.session import analysis

    g = torch.Generator().manual_seed(0)
    layers, vocab = 30, 7
    for trial in range(300):
        top1 = torch.randint(0, 3, (layers,), generator=g).tolist()  # few ids: long agreeing runs
        if trial % 3 == 0:
            agree = int(torch.randint(0, layers, (1,), generator=g))
            top1[agree:] = [top1[-1]] * (layers - agree)
        resid = torch.randn(layers, vocab, generator=g)
        resid[torch.arange(layers), torch.tensor(top1)] = 10.0  # row l's top-1 is top1[l]
        model = LensRows()
        got = analysis.commitment(model, resid, resid[-1])
        assert got == [commitment_layer(top1), top1[-1]]
        layer = got[0]
        assert sum(model.calls) <= layers - 1 and model.calls[0] == analysis.COMMITMENT_FIRST
        if layer > 0:  # rows from the layer below the commitment up; whole chunks at most
            assert sum(model.calls) <= layers - layer + analysis.COMMITMENT_CHUNK


@pytest.mark.slow
def test_on_the_default_model_the_commitment_found_from_the_top_equals_the_whole_lens(default_model):
    from inspector.engine.config import SamplingParams
    from inspector.session.session import Session

    s = Session(default_model, lens=False)
    s.prefill("Write a short story about a dragon who bakes bread.", SamplingParams(), chat=True, max_new_tokens=40)
    for _ in range(30):
        s.step(SamplingParams())
    found = [list(s.commitment(k)) for k in range(len(s.records))]
    whole = []
    for k in range(len(s.records)):
        top1 = [tops[0].id for tops in s.logit_lens(k)]
        whole.append([commitment_layer(top1), top1[-1]])
    assert found == whole
    L = default_model.config.num_hidden_layers
    assert {layer for layer, _ in found} & set(range(1, L - 9))  # some decided a chunk or more below the top
