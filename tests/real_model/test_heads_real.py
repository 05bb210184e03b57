"""The head atlas on the real models (slow): every head of SmolLM2-135M and Gemma 3 270M gets its four scores,
equal to those computed from transformers' eager attention maps on the same probe ids; the default model's
strongest heads are the ones FINDINGS measured; zeroing the top induction heads takes away the repeated
copy's advantage, and zeroing as many random heads does not.

Lean: the session's default model and Gemma 3 (each loaded once per test process: tests/conftest.py), each model's
transformers copy loaded for one comparison and dropped, small probes where the claim holds on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inspector.analysis import heads, heads_ablation
from inspector.analysis.head_findings import ROLES
from tests.support.heads import scores_by_hand

pytestmark = pytest.mark.slow

# /work/shared/FINDINGS.md "head roles in the default model": transformers, eager attention, 8 sequences of
# 48 random tokens repeated once (another probe than ours: other seed, other token range)
FINDINGS = {"induction": {(18, 6): 0.90, (17, 3): 0.76, (17, 4): 0.75, (17, 5): 0.65, (18, 7): 0.60},
            "previous_token": {(16, 0): 0.89, (11, 1): 0.86}, "duplicate_token": {(14, 3): 0.76, (8, 0): 0.73}}
TOLERANCE = 0.1  # two probes of FINDINGS agreed across heads at r = 0.95-0.998; a head's score moves by a few hundredths
# (n, K) of the probes for the equality with transformers (exact on any probe) and the ablation: for each model
# the smallest on which the ablation's claims hold; only the FINDINGS comparison needs FINDINGS' 48 x 8
SMALL = {"default": (24, 2), "gemma": (16, 2)}


@pytest.fixture(scope="module")
def gemma(gemma3_270m):
    return gemma3_270m  # the test process's one load of it (tests/conftest.py), shared with test_gemma3_real.py


def check_against_transformers(hf, atlas, probe) -> None:
    with torch.no_grad():
        att = hf(torch.as_tensor(probe.ids), output_attentions=True).attentions  # per layer (B, H, T, T)
    L, H = atlas.shape
    assert len(att) == L
    for layer in range(L):
        want = scores_by_hand(att[layer].double().numpy(), probe.n, len(probe.prefix))
        for r in ROLES:
            np.testing.assert_allclose(atlas.scores[r][layer], want[r], atol=2e-5, err_msg=f"layer {layer} {r}")


def check_ablation(model, atlas) -> None:
    none, top, rand = heads_ablation.ablation(model, atlas, "induction", 5, seed=0).rows
    assert none.loss_repeat < 0.3 * none.loss_first  # the repeated copy is predicted from the first
    assert top.loss_repeat - none.loss_repeat > 4 * abs(rand.loss_repeat - none.loss_repeat)


def test_default_model_atlas_equals_transformers_and_its_induction_heads_matter(default_model):
    import transformers

    probe = heads.model_probe(default_model, *SMALL["default"])
    atlas = heads.atlas(default_model.model, probe)
    assert atlas.shape == (30, 9) and all(np.isfinite(atlas.scores[r]).all() for r in ROLES)
    hf = transformers.LlamaForCausalLM.from_pretrained(default_model.weights_path, dtype=torch.float32,
                                                       attn_implementation="eager").eval()
    check_against_transformers(hf, atlas, probe)
    del hf
    check_ablation(default_model.model, atlas)


def test_default_model_strongest_heads_are_the_ones_findings_measured(default_model):
    atlas = heads.atlas(default_model.model, heads.model_probe(default_model))  # 48 x 8, the size FINDINGS used
    for role, measured in FINDINGS.items():
        top = atlas.top(role, len(measured))
        assert {(L, h) for L, h, _ in top} == set(measured), role
        for L, h, score in top:
            assert abs(score - measured[(L, h)]) < TOLERANCE, (role, L, h, score)


def test_gemma3_atlas_equals_transformers_and_its_induction_heads_matter(gemma):
    import transformers

    probe = heads.model_probe(gemma, *SMALL["gemma"])
    assert probe.prefix == (gemma.tokenizer.bos_id,)
    atlas = heads.atlas(gemma.model, probe)
    assert atlas.shape == (18, 4)
    for r in ROLES:
        assert np.isfinite(atlas.scores[r]).all() and (atlas.scores[r] >= 0).all() and (atlas.scores[r] <= 1).all()
    hf = transformers.Gemma3ForCausalLM.from_pretrained(str(gemma.weights_path), dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    check_against_transformers(hf, atlas, probe)
    del hf
    check_ablation(gemma.model, atlas)
