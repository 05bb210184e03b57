"""The page of a mixture of experts, without a browser: its Routing view, the Timing view's weights read per
step and the Serving lab's roofline, over a tiny random Mixtral (2 layers, 5 experts, 2 per token); and a
dense model's page, which has neither the Routing tab nor the weights-read chart.

What the views draw is checked against the session's own records: the router chart's bars are the recorded
router probabilities of the selected token and layer, the weights-read chart counts the distinct experts
each step's routing recorded, and the Serving lab's weight bytes are the shared weights plus a whole number
of experts (the union its forward's tokens went to, not the uniform expectation).
"""

from __future__ import annotations

import numpy as np
import pytest

from inspector.models.inventory import is_expert_group
from inspector.ui.app import build_app
from inspector.ui.bundle import ViewSlot
from tests.support.lab_context import make_page
from tests.support.handlers import SAMPLING
from tests.support.viz_records import tiny_loaded  # noqa: F401
from tests.support.tiny import tiny_moe_dir, tiny_moe_loaded  # noqa: F401

PROMPT = "The quick brown fox jumps"
ROUTING_SLOTS = {"routing-map-view", "router-chart", "routing-load-view"}


@pytest.fixture(scope="module")
def moe_run(tiny_moe_loaded):
    """The bare page of the mixture, its session id after a prefill and two decode steps."""
    page = make_page(tiny_moe_loaded)
    sid = page.handlers.prefill(None, PROMPT, False, "", *SAMPLING, 8, 0, 0)[0]
    for _ in range(2):
        page.handlers.step(sid, *SAMPLING, 0, 0)
    return page, sid


def page_ids(demo) -> set[str]:
    return {getattr(b, "elem_id", None) for b in demo.blocks.values()} - {None}


def test_a_dense_page_has_no_routing_tab_and_a_mixtures_page_draws_it(tiny_loaded, tiny_moe_loaded, moe_run):  # noqa: F811
    dense, moe = page_ids(build_app(tiny_loaded)), page_ids(build_app(tiny_moe_loaded))
    assert "tab-routing" not in dense and not ROUTING_SLOTS & dense and "weights-read-chart" not in dense
    assert {"tab-routing", "routing-layer", "weights-read-chart"} | ROUTING_SLOTS <= moe
    assert "routing" not in make_page(tiny_loaded).panels

    page, sid = moe_run
    h = page.handlers
    records = page.store.get(sid).session.records
    views = h.show_tab("routing")(sid, 1, 0)
    assert 'data-error="1"' not in views["status"]
    assert 'id="routing-map"' in views["routing_map"] and 'id="routing-load"' in views["routing_load"]
    newest = sum(r.n_new for r in records) - 1
    bars = views["router_fig"].data[0]  # the newest token in layer 1 (none clicked)
    assert np.allclose(bars.y, records[-1].routing.router_probs[1, -1], atol=1e-6)
    views = h.select(sid, 2, 0, 0)  # the token at position 2 clicked, layer 0: the prefill's third position
    assert "(position 2)" in views["router_fig"].layout.title.text and newest != 2
    assert np.allclose(views["router_fig"].data[0].y, records[0].routing.router_probs[0, 2], atol=1e-6)
    refused = h.show_tab("routing")(sid, 2, 0)  # the model has layers 0 and 1
    assert "layer must be a whole number from 0 to 1, got 2" in refused["status"] and "router_fig" not in refused


def test_the_timing_view_counts_the_experts_each_step_read(tiny_loaded, moe_run):  # noqa: F811
    page, sid = moe_run
    cfg, inv = page.loaded.config, page.inventory
    fig = page.handlers.show_tab("timing")(sid, 0, 0)["weights_fig"]
    records = page.store.get(sid).session.records
    shared, experts = fig.data
    read = [sum(len(set(r.routing.expert_ids[layer].ravel().tolist())) for layer in range(cfg.num_hidden_layers))
            for r in records]
    assert list(experts.customdata) == read and read[1] == cfg.num_hidden_layers * cfg.num_experts_per_tok
    expert_bytes = sum(e.bytes for e in inv.entries if is_expert_group(e.group))
    table = next(e.bytes for e in inv.entries if e.name == "model.embed_tokens.weight")  # untied: not read whole
    assert shared.y[0] * 2**20 == pytest.approx(inv.bytes - expert_bytes - table)
    per_expert = expert_bytes / (cfg.num_hidden_layers * cfg.num_experts)
    assert np.allclose(np.array(experts.y) * 2**20, np.array(read) * per_expert)
    dense = make_page(tiny_loaded)
    assert [s.key for s in dense.panels["timing"].slots] == ["timing_fig"]
    assert "weights_fig" not in dense.handlers.render.view_keys and "weights_fig" in page.handlers.render.view_keys


def test_the_serving_labs_roofline_counts_the_experts_a_batch_read(tiny_moe_loaded):
    from inspector.serving.experts import expert_costs
    from inspector.serving.roofline import forward_cost

    page = make_page(tiny_moe_loaded)
    lab, sid = page.panels["serving"], page.store.new_id()
    lab.load(sid, "The quick brown fox\nHello there, world", 2, 4, 0, 1, False, "", 4, *SAMPLING)
    for _ in range(3):  # the two prompts' prefill, then decode steps of both rows
        out = lab.step(sid)
    assert 'data-error="1"' not in out["status"]
    assert sum(len(t.x) for t in out["roofline"].data if t.name in ("prefill", "decode", "mixed")) == 3
    cfg = tiny_moe_loaded.config
    costs, elem = expert_costs(cfg, "fp32"), 4
    for rec in lab.kept(sid).sched.records:
        rows = [(r.num_tokens, r.context) for r in rec.rows]
        none = forward_cost(cfg, rows, elem, [0] * cfg.num_hidden_layers)  # the shared weights and the KV
        experts = (rec.bytes_moved - none.bytes_moved) / (costs.params_per_expert * elem)
        tokens = sum(n for n, _ in rows)
        assert experts == int(experts)  # whole experts: the ones routed to, not an expectation
        assert cfg.num_experts_per_tok * cfg.num_hidden_layers <= experts
        assert experts <= cfg.num_hidden_layers * min(cfg.num_experts, tokens * cfg.num_experts_per_tok)


def test_the_python_api_reads_a_mixtures_routing_and_draws_its_router(tmp_path):
    """`run.routing(k)` is the experts each position of forward k went to, as the records keep them (what
    `run --json` prints per step), and `run.figure("routing")` the page's router chart; a dense run says it
    routes nothing."""
    import inspector
    from tests.support.tiny import make_tiny_checkpoint

    moe = inspector.load(str(make_tiny_checkpoint(tmp_path / "mix", model_type="mixtral", num_local_experts=5,
                                                  num_experts_per_tok=2)))
    run = moe.prefill("The quick brown fox", max_new_tokens=3)
    run.step(2)
    ids = run.routing(-1)
    assert ids.shape == (moe.loaded.config.num_hidden_layers, 1, 2) and ids.dtype.name == "int32"
    assert (ids == run.records[-1].routing.expert_ids).all() and run.routing(0).shape[1] == len(run.prompt_ids)
    fig = run.figure("routing", layer=1)
    assert len(fig.data[0].y) == 5
    dense = inspector.load(str(make_tiny_checkpoint(tmp_path / "dense")))
    plain = dense.prefill("The quick brown fox", max_new_tokens=2)
    assert plain.routing() is None
    with pytest.raises(inspector.InputError, match="this model is dense"):
        plain.figure("routing")
