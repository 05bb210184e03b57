"""A mixture-of-experts model's routing is recorded every step, kept in trace files and printed by the CLI.

On a tiny random Mixtral checkpoint (5 experts, 2 per token): each ForwardRecord's `routing` holds, per
layer, the experts and weights of the positions that forward added and the router's distribution; they
equal what a FullRecorder sees in the same forward; a trace file keeps them (and a dense model's file, or
one written before routing existed, reads with routing None); `inspector run --json` gives each step's
routing, the newest position's experts per layer, and null for a dense model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.engine.recording import FullRecorder
from tests.support.tiny import tiny_llama_dir, tiny_moe_dir, tiny_moe_loaded  # noqa: F401

PARAMS = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def moe_run(tiny_moe_loaded):
    from inspector.session.session import Session

    s = Session(tiny_moe_loaded)
    s.prefill("The quick brown fox", PARAMS, max_new_tokens=10)
    for _ in range(4):
        s.step(PARAMS)
    return s


def test_every_forward_records_its_routing(moe_run, tiny_moe_loaded):
    cfg = tiny_moe_loaded.config
    L, k, E = cfg.num_hidden_layers, cfg.num_experts_per_tok, cfg.num_experts
    for rec in moe_run.records:
        r = rec.routing
        assert r is not None and (r.num_experts, r.top_k) == (E, k)
        assert r.expert_ids.shape == (L, rec.n_new, k) and r.expert_ids.dtype == np.int32
        assert r.expert_weights.shape == (L, rec.n_new, k) and r.router_probs.shape == (L, rec.n_new, E)
        assert np.allclose(r.router_probs.sum(-1), 1.0, atol=1e-5)
        assert np.allclose(r.expert_weights.sum(-1), 1.0, atol=1e-5)  # Mixtral renormalises the two
        top = np.argsort(-r.router_probs, axis=-1, kind="stable")[..., :k]  # the router's k most probable
        assert (np.sort(top, -1) == np.sort(r.expert_ids, -1)).all()


def test_recorded_routing_equals_the_forward_itself(moe_run, tiny_moe_loaded):
    """The prefill's recorded routing is what the model computed: rerun it with a FullRecorder."""
    from inspector.engine import steps

    model = tiny_moe_loaded.model
    rec = FullRecorder()
    with torch.no_grad():
        steps.prefill(model, moe_run.prompt_ids, steps.new_cache(model), rec)
    routing = moe_run.records[0].routing
    for i in range(tiny_moe_loaded.config.num_hidden_layers):
        assert (rec.values[f"blocks.{i}.mlp.hook_expert_ids"][0].numpy() == routing.expert_ids[i]).all()
        logits = rec.values[f"blocks.{i}.mlp.hook_router_logits"][0].float()
        assert np.allclose(torch.softmax(logits, -1).numpy(), routing.router_probs[i], atol=1e-6)


def test_a_dense_model_records_no_routing(tiny_llama_dir):  # noqa: F811
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    s = Session(load_model(str(tiny_llama_dir)))
    s.prefill("Hello", PARAMS, max_new_tokens=3)
    s.step(PARAMS)
    assert all(r.routing is None for r in s.records)


def test_trace_files_keep_the_routing(moe_run, tiny_moe_loaded, tmp_path):
    from inspector.session.trace_file import load_trace, save_trace

    path = tmp_path / "moe.safetensors"
    save_trace(moe_run, path)
    back = load_trace(path, tiny_moe_loaded)
    assert back.read_only is None
    for a, b in zip(moe_run.records, back.records):
        for field in ("expert_ids", "expert_weights", "router_probs"):
            assert np.array_equal(getattr(a.routing, field), getattr(b.routing, field)), field
    read_only = load_trace(path)  # no model: the routing is still there for the views
    assert read_only.records[-1].routing.expert_ids.shape == moe_run.records[-1].routing.expert_ids.shape


def test_a_trace_without_routing_opens_with_none(moe_run, tmp_path):
    """A file written before routing was recorded (its tensors and JSON lack it) still opens."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from inspector.session.trace_file import _digest, load_trace, save_trace

    path = tmp_path / "old.safetensors"
    save_trace(moe_run, path)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {n: f.get_tensor(n) for n in f.keys() if ".routing." not in n}
    doc = json.loads(meta["trace"])
    for fwd in doc["forwards"]:
        del fwd["routing"]
    meta["trace"] = json.dumps(doc, ensure_ascii=False)
    meta["sha256"] = _digest(meta["trace"], tensors)
    save_file(tensors, str(path), metadata=meta)
    assert all(r.routing is None for r in load_trace(path).records)


def test_run_json_gives_each_steps_routing(tiny_moe_loaded, tiny_moe_dir, tiny_llama_dir, capsys):  # noqa: F811
    from inspector.commands.cli import main

    assert main(["run", "--model", str(tiny_moe_dir), "--prompt", "The quick brown fox", "--max-new-tokens", "4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = tiny_moe_loaded.config
    for step in out["steps"]:
        assert len(step["routing"]) == cfg.num_hidden_layers
        assert all(len(ids) == cfg.num_experts_per_tok and len(set(ids)) == len(ids) for ids in step["routing"])
        assert all(0 <= e < cfg.num_experts for ids in step["routing"] for e in ids)
    assert main(["run", "--model", str(tiny_llama_dir), "--prompt", "Hi", "--max-new-tokens", "2", "--json"]) == 0
    assert all(step["routing"] is None for step in json.loads(capsys.readouterr().out)["steps"])


def test_run_json_routing_is_the_records_newest_position(moe_run):
    from inspector.commands.run import result_dict

    steps = result_dict(moe_run)["steps"]
    for rec, step in zip(moe_run.records, steps):
        assert step["routing"] == rec.routing.expert_ids[:, -1].tolist()


def test_info_names_the_experts_and_the_active_parameters(tiny_moe_loaded, tiny_moe_dir, tiny_llama_dir, capsys):  # noqa: F811
    from inspector.commands.cli import main

    cfg = tiny_moe_loaded.config
    D, I, L = cfg.hidden_size, cfg.expert_intermediate_size, cfg.num_hidden_layers
    assert main(["info", "--model", str(tiny_moe_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] - out["params_active"] == L * (cfg.num_experts - cfg.num_experts_per_tok) * 3 * D * I
    assert sum(1 for t in out["tensors"] if "expert" in t) == L * cfg.num_experts * 3
    assert main(["info", "--model", str(tiny_moe_dir)]) == 0
    assert "experts:      5 per layer, 2 per token" in capsys.readouterr().out
    assert main(["info", "--model", str(tiny_llama_dir), "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert dense["params_active"] == dense["params"]
