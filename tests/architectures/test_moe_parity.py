"""The four mixture-of-experts families equal transformers on the same random checkpoints.

Each case writes a tiny random checkpoint with transformers' `save_pretrained` (the Hub's tensor names: one
tensor per expert and projection), loads it with transformers (`from_pretrained`, eager attention) and with
our loader (`load_model`, strict names, the decode layout), and compares: logits at every position within
1e-4 in fp32, with the whole prompt at once and prefill + cached decode steps; the router's top-k choice
(and weights) of every token in every layer, read from transformers' router modules; 24 greedy ids against
`generate`; the trace points each family emits. The configs are not tuned to the real models: odd expert
counts, top-k from 1 to 4 (k = E included), Qwen3-MoE and OLMoE with and without normalised top-k, Granite
with multipliers far from 1 and tied embeddings, Mixtral with a sliding window shorter than the prompt.
"""

from __future__ import annotations

import pytest
import torch

from inspector.engine import steps as engine
from inspector.engine.recording import FullRecorder
from inspector.engine.trace import model_hook_names
from tests.support.tiny import make_tiny_checkpoint

GRANITE = dict(embedding_multiplier=3.0, residual_multiplier=0.4, attention_multiplier=0.07, logits_scaling=2.5)
CASES = {
    "mixtral": dict(num_local_experts=5, num_experts_per_tok=2),
    "mixtral-window": dict(num_local_experts=3, num_experts_per_tok=3, sliding_window=8),
    "qwen3_moe": dict(num_experts=6, num_experts_per_tok=4, moe_intermediate_size=40, norm_topk_prob=False),
    "qwen3_moe-norm": dict(num_experts=7, num_experts_per_tok=3, moe_intermediate_size=48, norm_topk_prob=True),
    "olmoe": dict(num_experts=9, num_experts_per_tok=1),
    "olmoe-norm": dict(num_experts=5, num_experts_per_tok=2, norm_topk_prob=True, tie=True),
    "granitemoe": dict(num_local_experts=5, num_experts_per_tok=3, **GRANITE),
    "granitemoe-tied": dict(num_local_experts=4, num_experts_per_tok=1, embedding_multiplier=12.0,
                            residual_multiplier=0.22, attention_multiplier=0.015625, logits_scaling=6.0, tie=True),
}
_pairs: dict[str, tuple] = {}


def pair(case: str, tmp_path_factory: pytest.TempPathFactory):
    """(transformers model, our LoadedModel) on one checkpoint written for `case` (built once per session)."""
    if case not in _pairs:
        import transformers

        from inspector.models.loader import load_model

        kw = dict(CASES[case])
        tie = kw.pop("tie", False)
        directory = make_tiny_checkpoint(tmp_path_factory.mktemp("moe") / case, model_type=case.split("-")[0],
                                         tie=tie, init_std=0.1, num_hidden_layers=3, **kw)
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
        _pairs[case] = (hf, load_model(str(directory)))
    return _pairs[case]


def ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 300, (1, n), generator=torch.Generator().manual_seed(seed))


class RouterChoices:
    """Forward hooks on transformers' router modules: each layer's (top-k ids, weights) of the last forward."""

    def __init__(self, hf) -> None:
        self.routers = [m for m in hf.modules() if type(m).__name__.endswith("TopKRouter")]
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        for m in self.routers:
            m.register_forward_hook(lambda mod, args, out: self.seen.append((out[2], out[1])))


@pytest.mark.parametrize("case", list(CASES))
def test_logits_and_routing_equal_transformers(case, tmp_path_factory):
    hf, loaded = pair(case, tmp_path_factory)
    ours, cfg = loaded.model, loaded.config
    routers = RouterChoices(hf)
    assert len(routers.routers) == cfg.num_hidden_layers
    x = ids(30)
    with torch.no_grad():
        expected = hf(x).logits  # (1, 30, V)
        rec = FullRecorder()
        got = ours(x, rec=rec)
    assert float(expected.abs().max()) > 0.1  # not flat
    assert (got - expected).abs().max().item() < 1e-4
    for layer, (hf_ids, hf_weights) in enumerate(routers.seen):  # (30, k) each
        our_ids = rec.values[f"blocks.{layer}.mlp.hook_expert_ids"][0]
        our_weights = rec.values[f"blocks.{layer}.mlp.hook_expert_weights"][0]
        assert our_ids.shape == (30, cfg.num_experts_per_tok)
        assert torch.equal(our_ids, hf_ids), layer
        assert (our_weights - hf_weights.float()).abs().max().item() < 1e-5
        if cfg.num_experts_per_tok > 1 and cfg.num_experts > cfg.num_experts_per_tok:  # not every expert, every time
            assert len(set(our_ids.flatten().tolist())) > cfg.num_experts_per_tok  # tokens differ in their choice
    sums = torch.stack([rec.values[f"blocks.{i}.mlp.hook_expert_weights"][0].sum(-1) for i in range(3)])
    normalized = cfg.model_type in ("mixtral", "granitemoe") or cfg.norm_topk_prob
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-6) == normalized


@pytest.mark.parametrize("case", list(CASES))
def test_cached_decode_equals_transformers_and_routes_alike(case, tmp_path_factory):
    hf, loaded = pair(case, tmp_path_factory)
    ours = loaded.model
    routers = RouterChoices(hf)
    x = ids(28, seed=4)
    with torch.no_grad():
        expected = hf(x).logits[0]  # (28, V)
    hf_ids = [i for i, _ in routers.seen]  # per layer (28, k)
    cache = engine.new_cache(ours)
    rec = FullRecorder()
    rows = [engine.prefill(ours, x[0, :12].tolist(), cache, rec)]
    chosen = [[rec.values[f"blocks.{i}.mlp.hook_expert_ids"][0]] for i in range(3)]
    for t in range(12, 27):
        rec = FullRecorder()
        rows.append(engine.decode_step(ours, int(x[0, t]), cache, rec))
        for i in range(3):
            chosen[i].append(rec.values[f"blocks.{i}.mlp.hook_expert_ids"][0])
    assert (torch.stack(rows) - expected[11:27]).abs().max().item() < 1e-4
    for i in range(3):
        assert torch.equal(torch.cat(chosen[i]), hf_ids[i][:27]), i


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe-norm", "olmoe", "granitemoe-tied"])
def test_24_greedy_ids_equal_transformers_generate(case, tmp_path_factory):
    hf, loaded = pair(case, tmp_path_factory)
    ours = loaded.model
    prompt = ids(10, seed=3)[0].tolist()
    eos = [2]
    expected = hf.generate(torch.tensor([prompt]), max_new_tokens=24, min_new_tokens=24, do_sample=False,
                           pad_token_id=0, eos_token_id=eos)[0, len(prompt):].tolist()

    def greedy(logits: torch.Tensor) -> int:  # min_new_tokens bars EOS in generate: the same here
        return int(logits.index_fill(-1, torch.tensor(eos), float("-inf")).argmax())

    cache = engine.new_cache(ours)
    got = [greedy(engine.prefill(ours, prompt, cache))]
    while len(got) < 24:
        got.append(greedy(engine.decode_step(ours, got[-1], cache)))
    assert got == expected


class Names:
    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, name, value):
        self.names.append(name)


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe", "olmoe", "granitemoe"])
def test_each_family_emits_its_points_in_order(case, tmp_path_factory):
    _, loaded = pair(case, tmp_path_factory)
    rec = Names()
    engine.prefill(loaded.model, ids(6)[0].tolist(), engine.new_cache(loaded.model), rec)
    assert rec.names == model_hook_names(loaded.config)
    block = [n.split(".", 2)[2] for n in rec.names if n.startswith("blocks.0.")]
    assert "mlp.hook_pre" not in block and "mlp.hook_post" not in block
    mlp = block.index("ln2.hook_normalized")
    assert block[mlp + 1:mlp + 5] == ["mlp.hook_router_logits", "mlp.hook_expert_ids", "mlp.hook_expert_weights",
                                      "hook_mlp_out"]
    assert ("attn.hook_q_normed" in block) == (case in ("qwen3_moe", "olmoe"))


def test_a_recorder_can_force_the_experts(tmp_path_factory):
    """`hook_expert_ids` and `hook_expert_weights` are intervention points: with every token forced onto
    expert 0 twice at weight 0.5, each layer's MLP output is expert 0's alone."""
    _, loaded = pair("mixtral", tmp_path_factory)
    ours = loaded.model

    class Forced:
        def __init__(self) -> None:
            self.values: dict[str, torch.Tensor] = {}

        def __call__(self, name, value):
            if name.endswith("mlp.hook_expert_ids"):
                return torch.zeros_like(value)
            if name.endswith("mlp.hook_expert_weights"):
                return torch.full_like(value, 0.5)
            self.values[name] = value
            return None

    for n in (1, 8):  # a decode-sized forward and a prompt
        rec = Forced()
        with torch.no_grad():
            ours(ids(n), rec=rec)
            for i, block in enumerate(ours.model.layers):
                alone = block.mlp.experts[0](rec.values[f"blocks.{i}.ln2.hook_normalized"])
                assert (rec.values[f"blocks.{i}.hook_mlp_out"] - alone).abs().max().item() < 1e-5
