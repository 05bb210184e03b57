"""The sentences of issue 44 (every sentence true, round 2) against the code and the run that make them.

Each test checks a sentence that could be false: the flash tile heatmap is drawn light-for-low like every other
heatmap (the page's BLUES, not plotly.js's reversed "Blues"); the tour on a mixture of experts says a forward
reads the shared weights and only the k routed experts per layer, with k and E from the config, and the norm
step's root-mean-square is the residual's length over √d; the head atlas's title counts the heads by colour
and its legend says what the scores do not measure; an H2O score above 1 is explained; the speculative chips'
q and p are defined; the memory calculator's bits per weight are its own formula's and the Quantization lab's
int4 its modules' bytes; the glossary's ablation names the lab's mean ablation.
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pytest
import torch

from inspector.analysis.head_findings import ROLES, HeadAtlas, Probe
from inspector.engine.config import SamplingParams
from inspector.quant.measurements import FlashWalk, KVPolicyRun
from inspector.session.session import Session
from inspector.ui.tour_panel import tour_facts
from inspector.viz import heads as vh
from inspector.viz import kv_policies as vkp
from inspector.viz import serving as vs
from inspector.viz import speculative as vsp
from inspector.viz.common import BLUES
from inspector.viz.glossary import glossary_terms
from inspector.viz.tour import tour_html
from tests.support.tiny import tiny_moe_dir, tiny_moe_loaded  # noqa: F401 (fixtures)
from tests.support.viz_records import tiny_loaded, tiny_run  # noqa: F401 (fixtures)


def sections(html: str) -> dict[str, str]:
    """stage key -> that tour step's text, tags stripped."""
    found = re.findall(r'<section class="ii-tour-step" data-stage="(\w+)"(.*?)</section>', html, re.S)
    return {k: re.sub(r"<[^>]+>", "", v.split('class="ii-tour-text">', 1)[1]) for k, v in found}


def _lightness(color: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", color)[:3])
    return (r + g + b) / 3


# ---- 7: the flash tile heatmap's colours
def test_the_flash_tile_heatmap_is_light_for_low_like_every_other_heatmap():
    T = 10
    walk = FlashWalk(0, 0, ["a"] * T, [(0, 8), (8, T)], np.zeros((2, T)), np.zeros((2, T)),
                     [np.zeros((T, 8)), np.zeros((T, 2))], np.zeros((2, T)), 1, 1, 1.0, 1.0)
    scale = vkp.flash_tile_figure(walk, 0).data[0].colorscale
    assert [list(s) for s in scale] == [list(s) for s in BLUES]
    assert _lightness(scale[0][1]) > _lightness(scale[-1][1])  # weight 0 light, weight 1 dark


# ---- 3: the tour on a mixture of experts
@pytest.fixture(scope="module")
def moe_session(tiny_moe_loaded):  # noqa: F811
    s = Session(tiny_moe_loaded)
    s.prefill("The quick brown fox", SamplingParams(), max_new_tokens=4)
    s.step(SamplingParams())
    return s


def test_the_moe_tour_says_a_step_reads_the_shared_weights_and_k_experts(tiny_moe_loaded, moe_session):  # noqa: F811
    cfg = tiny_moe_loaded.config
    facts = tour_facts(tiny_moe_loaded, 123_456)
    assert (facts.num_experts, facts.experts_per_token) == (cfg.num_experts, cfg.num_experts_per_tok) == (5, 2)
    for rec in (None, *moe_session.records):
        text = sections(tour_html(facts, rec))
        weights = text["weights"]
        assert "reads every weight once" not in weights
        assert "the shared weights" in weights and "only the experts its tokens were routed to" in weights
        assert f"{cfg.num_experts_per_tok} of the {cfg.num_experts} for a decode step's one token" in weights
        assert "memory holds them all (120.6 KiB here)" in weights
        assert all(2 <= t.count(". ") + 1 <= 4 for k, t in text.items() if k != "keys")  # the tour's step length
        assert "a mixture of 5 expert MLPs, of which a router picks 2 per token" in text["layers"]
    decode = sections(tour_html(facts, moe_session.records[-1]))["timing"]
    assert "reads the same weights" not in decode
    assert f"reads the shared weights and {cfg.num_experts_per_tok} experts per layer" in decode
    prefill = sections(tour_html(facts, moe_session.records[0]))["weights"]
    assert "FLOP per byte of the shared weights" in prefill


def test_a_dense_tour_still_reads_every_weight(tiny_loaded, tiny_run):  # noqa: F811
    facts = tour_facts(tiny_loaded, 1000)
    assert facts.num_experts == 0
    text = sections(tour_html(facts, tiny_run.records[-1]))
    assert "A forward reads every weight once" in text["weights"] and "expert" not in text["weights"]
    assert "Each step reads the same weights plus every cached K and V" in text["timing"]


def test_the_norm_step_divides_by_the_rms_not_the_length(tiny_loaded, tiny_run):  # noqa: F811
    rec = tiny_run.records[-1]
    d = tiny_loaded.config.hidden_size
    norm = float(rec.resid_post[-1, -1])
    text = sections(tour_html(tour_facts(tiny_loaded), rec))["norm"]
    length = float(re.search(r"‖x‖ = ([\d.]+)", text).group(1))
    rms = float(re.search(rf"‖x‖/√{d} = ([\d.]+)", text).group(1))
    assert length == pytest.approx(norm, abs=0.5) and rms == pytest.approx(norm / math.sqrt(d), abs=0.006)
    # what RMSNorm divides by: sqrt(mean(x^2)) = ‖x‖/√d
    x = torch.randn(d)
    assert float(x.pow(2).mean().sqrt()) == pytest.approx(float(x.norm()) / math.sqrt(d), rel=1e-5)


# ---- 2: the head atlas
def _atlas() -> HeadAtlas:
    rng = np.random.default_rng(1)
    scores = {r: rng.uniform(0, 0.3, size=(4, 3)) for r in ROLES}
    scores["first_token"][:3] += 0.5  # most heads rest on position 0
    scores["induction"][3, 2] = 0.95
    return HeadAtlas(Probe(6, 2, 5, (), np.zeros((2, 12), dtype=np.int64), 100, 3), scores, 0.1, 2)


def test_the_atlas_title_counts_the_heads_of_each_colour():
    a = _atlas()
    best = a.strongest()
    title = vh.atlas_figure(a).layout.title.text.replace("<br>", " ")
    counts = re.search(r"of the (\d+) heads, largest (\d+) previous-token, (\d+) first-token, (\d+) duplicate-token, "
                       r"(\d+) induction", title)
    assert counts, title
    assert int(counts.group(1)) == best.size
    assert [int(counts.group(i)) for i in range(2, 6)] == [int((best == r).sum()) for r in range(len(ROLES))]
    assert int(counts.group(3)) >= 9  # the first three layers' heads rest on position 0 here


def test_the_legend_says_what_the_scores_do_not_measure():
    lines = vh.legend_text(_atlas().probe).splitlines()
    assert "not what the head writes" in lines[0]
    assert "idle on this probe" in lines[2] and "not a head whose job is the sink" in lines[2]
    induction = lines[4]
    assert "which lets a model continue" not in induction
    assert "prefix-matching half" in induction and "copying" in induction and "Ablate tests it" in induction


# ---- 7: the H2O score on hover
def test_an_h2o_score_above_1_is_explained():
    kept = np.array([[[[3, 1, 0]]]], dtype=np.uint8)  # (layers, kv heads, forwards, positions)
    scores = np.array([[[[2.75, 0.0, 0.0]]]], dtype=np.float32)
    run = KVPolicyRun("h2o, budget 2", 2, ["a", "b", "c"], [], "", "", kept, scores)
    hover = vkp.kept_map_figure(run, 0, 0).data[0].text[0][0]
    assert "score 2.75" in hover and "can exceed 1" in hover and "summed over every query so far" in hover


def test_a_real_h2o_score_exceeds_1(tiny_loaded):  # noqa: F811
    """The sentence's reason: the scores H2O keeps are sums of attention weights over queries and group heads."""
    from inspector.quant.kv_eval import CacheSpec
    from inspector.quant.kv_watch import watch_policy

    tok = tiny_loaded.tokenizer
    run = watch_policy(tiny_loaded.model, tok.encode("the cat sat on the mat and the dog sat too"), 4,
                       CacheSpec("h2o", 6), tok.piece, tok.decode, tiny_loaded.stop_ids)
    assert float(run.scores.max()) > 1.0


# ---- 7: the speculative chips
def test_the_speculative_q_and_p_are_defined():
    assert "q is the drafter's probability" in vsp.CAPTION and "p the full model's" in vsp.CAPTION
    assert "with greedy, the plain softmax of each model's logits" in vsp.CAPTION
    chip = html.unescape(vsp._chip("x", "ii-spec-kept", "draft 1: kept", 0.4, 0.7))
    assert "q 0.40: the drafter's probability of it" in chip and "p 0.70: the full model's" in chip


# ---- 7: bits per weight, the memory calculator against the Quantization lab
def test_the_bits_per_weight_the_memory_calculator_states_are_its_formulas():
    from inspector.serving.memory import WEIGHT_DTYPES

    cols = 32 * 64
    for dtype, bits in (("int8", 8.5), ("int4", 4.5)):
        assert WEIGHT_DTYPES[dtype].matrix_bytes(1, cols) * 8 / cols == bits
        assert f"{bits} bits a weight" in vs.format_note(dtype)
    assert vs.format_note("bf16") == ""


def test_the_quantization_labs_int4_g32_is_5_bits_and_its_int8_about_8():
    from inspector.quant.linear import Int4Linear, Int8Linear

    w = torch.randn(64, 256)
    assert Int4Linear(w, 32).nbytes * 8 / w.numel() == 5.0  # 4 bits + fp16 scale + fp16 minimum per 32
    assert 8.0 < Int8Linear(w).nbytes * 8 / w.numel() < 8.2  # 8 bits + one fp32 scale per row of 256
    assert "5.0" in vs.format_note("int4") and "about 8" in vs.format_note("int8")


# ---- 6: ablation in the glossary
def test_the_glossary_ablation_names_the_labs_mean_ablation():
    from inspector.generation.interventions import HEAD_OPS

    assert "mean" in HEAD_OPS  # the Interventions lab offers it for a head
    meaning = glossary_terms()["mean ablation"]
    assert "mean output" in meaning and "zeroing" in meaning.lower() and "scaling" in meaning


# ---- the review's own findings
def test_the_glossary_defines_the_routing_and_head_atlas_words():
    from inspector.viz import routing as vr

    terms = glossary_terms()
    for word in ("mixture of experts", "expert", "router", "induction head", "previous-token head"):
        assert word in terms, word
    assert all(w in vr.CAPTION for w in ("mixture of experts", "router", "experts"))
    assert "copies it into the prediction" in terms["induction head"] and "Olsson" in terms["induction head"]
    assert "many small MLPs" not in vr.CAPTION  # Mixtral's experts are as wide as a dense MLP


def test_the_dla_title_says_its_bars_are_the_largest_by_size_either_sign():
    from inspector.analysis.findings import Attribution, LayerParts
    from inspector.viz.interventions import dla_figure

    a = Attribution(7, "x", 1.0, 0.25, [LayerParts([-0.5, 0.75], 0.5)])
    fig = dla_figure(a)
    assert "largest by size, either sign" in fig.layout.title.text.replace("<br>", " ")
    assert list(fig.data[0].y)[::-1][:2] == ["head 0.1", "head 0.0"]  # 0.75 then -0.5: by size, sign kept
