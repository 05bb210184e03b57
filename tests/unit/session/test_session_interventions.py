"""Interventions on a running session: a branch per intervention, labelled, keeping its levers; switching
back and forth restores each branch's run exactly; the comparison of two branches; attribution per step."""

from __future__ import annotations

import pytest
import torch

from inspector.analysis.attribution import attribute_step
from inspector.analysis.compare import compare
from inspector.engine.config import SamplingParams
from inspector.generation import interventions as ivs
from inspector.generation.levers import Levers
from inspector.session.branches import BranchTree
from inspector.session.intervene import replay, rerun
from inspector.session.session import Session
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)

PARAMS = SamplingParams(temperature=0.9, seed=5)
PROMPT = "The quick brown fox jumps"


def run(loaded, levers=Levers(), n=10) -> Session:
    s = Session(loaded, levers=levers)
    s.prefill(PROMPT, PARAMS, max_new_tokens=n)
    for _ in s.play(PARAMS):
        pass
    return s


def test_an_intervention_branch_is_the_run_under_it_and_switching_restores_each(tiny_loaded):  # noqa: F811
    cfg = tiny_loaded.config
    s = run(tiny_loaded)
    plain_ids, plain_logits = list(s.generated_ids), [f.logits.clone() for f in s.trace.forwards]
    tree = BranchTree(s.generated_ids, s.text, levers=s.levers)
    off = Levers(interventions=ivs.head(cfg, 1, 2) + ivs.component(cfg, "mlp_out", 0, "scale", factor=0.2))
    rerun(s, off)
    b = tree.fork_levers("head 1.2 off", off, s.generated_ids, s.text)
    assert b.label == "head 1.2 off" and b.levers is off and tree.current == b.id == 1
    alone = run(tiny_loaded, off)  # the same run made from scratch under the intervention
    assert s.generated_ids == alone.generated_ids and len(s.generated_ids) == len(plain_ids)
    assert all(torch.equal(x.logits, y.logits) for x, y in zip(s.trace.forwards, alone.trace.forwards))
    assert max(float((x.logits - y).abs().max()) for x, y in zip(s.trace.forwards, plain_logits)) > 1e-3
    s.branch(3, (s.generated_ids[3] + 1) % cfg.vocab_size)  # a token fork inside the intervention branch
    tree.fork(3, s.generated_ids[3], "x", s.generated_ids, s.text)
    assert tree.branches[2].levers is off
    for target in (0, 2, 1, 0):  # switch around: each branch's tokens and logits come back exactly
        br = tree.get(target)
        replay(s, br.levers, br.generated_ids)
        tree.current = target
        assert s.generated_ids == br.generated_ids and s.levers is br.levers
    assert all(torch.equal(f.logits, y) for f, y in zip(s.trace.forwards, plain_logits))
    assert s.recompute_last_step()[0] < 1e-4


def test_compare_two_branches(tiny_loaded):  # noqa: F811
    cfg = tiny_loaded.config
    s = run(tiny_loaded)
    off = Levers(interventions=ivs.component(cfg, "attn_out", 1, "scale", factor=-3.0))
    other = run(tiny_loaded, off)
    c = compare(tiny_loaded, s.prompt_ids, PARAMS, ("as is", s.levers, s.generated_ids),
                ("attn 1 ×-3", off, other.generated_ids), max_new_tokens=10)
    n = min(len(s.generated_ids), len(other.generated_ids))
    assert c.labels == ("as is", "attn 1 ×-3") and len(c.tops[0]) == len(c.tops[1]) == len(c.resid_diff) == n
    first = next((k for k in range(n) if s.generated_ids[k] != other.generated_ids[k]), None)
    assert c.first_diverging == first
    assert c.tops[0][0][0][0] == s.records[0].sample.candidates[0].piece
    assert len(c.resid_diff[0]) == cfg.num_hidden_layers
    assert c.resid_diff[0][0] == pytest.approx(0.0, abs=1e-6)  # attention 0 and MLP 0 are untouched at step 0
    assert c.resid_diff[0][1] > 1e-3


def test_attribution_of_a_step_sums_to_the_logit_it_was_drawn_from(tiny_loaded):  # noqa: F811
    cfg = tiny_loaded.config
    s = run(tiny_loaded, Levers(interventions=ivs.head(cfg, 0, 1)), n=6)
    for step in (0, 4):
        a = attribute_step(s, step)
        assert a.token_id == s.generated_ids[step] and a.layers[0].heads[1] == 0.0
        assert a.logit == pytest.approx(float(s.trace.forwards[step].logits[a.token_id]), abs=1e-4)
        assert a.total == pytest.approx(a.logit, abs=1e-5 * max(1.0, abs(a.logit)))
