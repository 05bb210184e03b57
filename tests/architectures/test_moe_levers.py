"""Interventions on a mixture of experts: the points its blocks record are the allowed ones wherever an
intervention is checked (attribution, patching, mean-ablation, a session's levers), and the dense MLP's
points, which a mixture of experts never fires, are refused in one line instead of silently doing nothing.

On a tiny random Mixtral (our Transformer from its config: 3 layers, 5 experts, 2 per token; no checkpoint).
"""

from __future__ import annotations

import pytest
import torch

from tests.support.engine_fixtures import tiny_model
from inspector.analysis.attribution import attribute
from inspector.analysis.patching import sweep
from inspector.engine import steps
from inspector.engine.recording import FullRecorder
from inspector.engine.trace import MLP_HOOKS, MOE_HOOKS, model_hook_names
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.interventions import head_mean
from inspector.generation.levers import Intervention, Levers, check_interventions

IDS = [5, 17, 99, 3, 42, 7, 250, 11]
CORRUPT = [5, 17, 98, 3, 42, 7, 250, 11]


def forced(layer: int) -> Intervention:
    """Every token of `layer` goes to experts 0 and 1 (the router's choice replaced)."""
    return Intervention(f"blocks.{layer}.mlp.hook_expert_ids", lambda ids: torch.zeros_like(ids) + torch.arange(2),
                        f"experts 0, 1 at layer {layer}")


DENSE = Intervention("blocks.1.mlp.hook_pre", lambda x: x * 0.0, "mlp gate off")


@pytest.fixture(scope="module")
def moe():
    return tiny_model(model_type="mixtral", num_local_experts=5, num_experts_per_tok=2)


def test_the_points_an_moe_block_records_are_the_allowed_ones(moe):
    cfg = moe.config
    for point in model_hook_names(cfg):
        check_interventions((Intervention(point, lambda x: x),), cfg)
    assert {f"blocks.0.{h}" for h in MOE_HOOKS} <= set(model_hook_names(cfg))
    for h in MLP_HOOKS:
        with pytest.raises(InputError, match=f"no trace point 'blocks.1.{h}'.*mixture of experts"):
            check_interventions((Intervention(f"blocks.1.{h}", lambda x: x),), cfg)
    dense = tiny_model().config
    with pytest.raises(InputError, match="no trace point") as refused:
        check_interventions((forced(1),), dense)
    assert "mixture of experts" not in str(refused.value)


def test_a_forced_routing_is_what_the_model_goes_on_with(moe):
    rec = FullRecorder()
    loop.forward(moe, steps.new_cache(moe), [IDS], Levers(interventions=(forced(1),)), rec)
    ids = rec.values["blocks.1.mlp.hook_expert_ids"][0]  # (T, k)
    assert ids.tolist() == [[0, 1]] * len(IDS)
    free = FullRecorder()
    loop.forward(moe, steps.new_cache(moe), [IDS], rec=free)
    assert free.values["blocks.1.mlp.hook_expert_ids"][0].tolist() != ids.tolist()  # the router chose otherwise


def test_attribution_adds_up_under_a_forced_routing_and_refuses_a_dense_point(moe):
    plain = attribute(moe, IDS)
    a = attribute(moe, IDS, plain.token_id, Levers(interventions=(forced(1),)))
    assert a.total == pytest.approx(a.explained, rel=1e-4, abs=1e-5)
    assert a.layers[1].mlp != pytest.approx(plain.layers[1].mlp)  # other experts wrote layer 1's MLP part
    with pytest.raises(InputError, match="no trace point 'blocks.1.mlp.hook_pre'"):
        attribute(moe, IDS, levers=Levers(interventions=(DENSE,)))


def test_patching_and_mean_ablation_take_moe_points_and_refuse_dense_ones(moe):
    routed = Levers(interventions=(forced(0),))
    result = sweep(moe, IDS, CORRUPT, 5, 6, "mlp_out", routed)
    assert len(result.matrix) == moe.config.num_hidden_layers
    mean = head_mean(moe, IDS, 1, 0, routed)
    assert mean.shape == (moe.config.head_dim,) and not torch.equal(mean, head_mean(moe, IDS, 1, 0))
    dense = Levers(interventions=(DENSE,))
    with pytest.raises(InputError, match="mixture of experts"):
        sweep(moe, IDS, CORRUPT, 5, 6, "mlp_out", dense)
    with pytest.raises(InputError, match="mixture of experts"):
        head_mean(moe, IDS, 1, 0, dense)
