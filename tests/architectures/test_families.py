"""Every model family the engine implements equals transformers on the same random weights.

Tiny random models of Qwen3, Mistral, Phi-3, Gemma 2 and Gemma 3 (built offline from config objects by
`engine_fixtures.hf_pair`): logits at every position within 1e-4 (fp32) with and without the KV cache,
prompts longer than the sliding window, 32 greedy ids equal to `generate`'s, in both weight layouts; each
family's own trace points in order; sliding layers' attention zero beyond the window; the generation
loop's levers (interventions at the family's points, cached equal to recomputed); and refusals that name
what is supported.
"""

from __future__ import annotations

import pytest
import torch

from inspector.engine import steps as engine
from inspector.engine.arch import FAMILY_FEATURES
from inspector.engine.config import SLIDING, ModelConfig
from inspector.engine.trace import hook_names, model_hook_names
from inspector.errors import InputError, UnsupportedConfigError
from inspector.generation.levers import Intervention, Levers, check_interventions
from tests.support.engine_fixtures import hf_pair
from tests.support.families import FAMILIES, WINDOW


def pair(case: str, layout: str | None = None):
    return hf_pair(case.split("-")[0], layout=layout, **FAMILIES[case])


def ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 300, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("layout", [None, "decode", "batch"])
@pytest.mark.parametrize("case", list(FAMILIES))
def test_logits_match_transformers_with_and_without_the_cache(case, layout):
    hf, ours, cfg = pair(case, layout)
    x = ids(40)
    with torch.no_grad():
        expected = hf(x).logits  # (1, 40, V)
        got = ours(x)
    assert float(expected.abs().max()) > 0.1  # not flat
    assert (got - expected).abs().max().item() < 1e-4
    cache = engine.new_cache(ours)
    rows = [engine.prefill(ours, x[0, :20].tolist(), cache)]
    for t in range(20, 39):
        rows.append(engine.decode_step(ours, int(x[0, t]), cache))
    cached = torch.stack(rows)  # (20, V): next-token logits after positions 19..38
    assert (cached - expected[0, 19:39]).abs().max().item() < 1e-4


@pytest.mark.parametrize("case", list(FAMILIES))
def test_32_greedy_ids_equal_transformers_generate(case):
    hf, ours, cfg = pair(case, "decode")
    prompt = ids(12, seed=3)[0].tolist()
    expected = hf.generate(torch.tensor([prompt]), max_new_tokens=32, min_new_tokens=32, do_sample=False,
                           pad_token_id=0)[0, len(prompt):].tolist()
    eos = list(hf.generation_config.eos_token_id or []) if isinstance(hf.generation_config.eos_token_id, list) \
        else [t for t in [hf.generation_config.eos_token_id] if t is not None]

    def greedy(logits: torch.Tensor) -> int:  # min_new_tokens bars EOS in generate: the same here
        return int(logits.index_fill(-1, torch.tensor(eos, dtype=torch.long), float("-inf")).argmax())

    cache = engine.new_cache(ours)
    got = [greedy(engine.prefill(ours, prompt, cache))]
    while len(got) < 32:
        got.append(greedy(engine.decode_step(ours, got[-1], cache)))
    assert got == expected


@pytest.mark.parametrize("chunk", [3, 7])
@pytest.mark.parametrize("case", ["mistral", "gemma3_text", "gemma2"])
def test_blocked_long_forwards_keep_the_window(case, chunk, monkeypatch):
    """Queries attended in blocks (as a long prompt is) see the same window: logits unchanged."""
    import inspector.engine.model

    monkeypatch.setattr(inspector.engine.model, "ATTN_CHUNK", chunk)
    hf, ours, cfg = pair(case)
    x = ids(30, seed=5)
    with torch.no_grad():
        assert (ours(x) - hf(x).logits).abs().max().item() < 1e-4


class Names:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.values: dict[str, torch.Tensor] = {}

    def __call__(self, name, value):
        self.names.append(name)
        self.values[name] = value


def test_each_family_emits_its_own_points_in_order():
    for case in FAMILIES:
        _, ours, cfg = pair(case)
        rec = Names()
        engine.prefill(ours, ids(12)[0].tolist(), engine.new_cache(ours), rec)
        assert rec.names == model_hook_names(cfg), case
    gemma3 = model_hook_names(pair("gemma3_text")[2])
    assert gemma3[1:24] == [f"blocks.0.{h}" for h in (
        "hook_resid_pre", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_q_normed",
        "attn.hook_k_normed", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores", "attn.hook_pattern",
        "attn.hook_z", "hook_attn_out_raw", "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized",
        "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out_raw", "hook_mlp_out", "hook_resid_post")] + \
        ["blocks.1.hook_resid_pre", "blocks.1.ln1.hook_normalized"]
    gemma2 = model_hook_names(pair("gemma2")[2])
    assert gemma2[-3:] == ["ln_final.hook_normalized", "unembed.hook_logits_raw", "unembed.hook_logits"]
    llama_cfg = hf_pair("llama")[2]
    assert model_hook_names(llama_cfg) == hook_names(llama_cfg.num_hidden_layers)  # Llama's list unchanged


def test_post_norms_and_softcap_points_hold_what_they_name():
    _, ours, cfg = pair("gemma2-tied")
    rec = Names()
    with torch.no_grad():
        ours(ids(12), rec=rec)
    v = rec.values
    block = ours.model.layers[0]
    assert torch.allclose(v["blocks.0.hook_attn_out"], block.post_attention_layernorm(v["blocks.0.hook_attn_out_raw"]))
    assert torch.allclose(v["blocks.0.hook_mlp_out"], block.post_feedforward_layernorm(v["blocks.0.hook_mlp_out_raw"]))
    raw, capped = v["unembed.hook_logits_raw"], v["unembed.hook_logits"]
    assert float(raw.abs().max()) > 2.0 >= float(capped.abs().max())  # the cap (2.0) bit
    assert torch.allclose(capped, 2.0 * torch.tanh(raw / 2.0))


@pytest.mark.parametrize("case", ["gemma3_text", "mistral"])
def test_sliding_layers_attend_only_within_the_window(case):
    _, ours, cfg = pair(case)
    rec = Names()
    with torch.no_grad():
        ours(ids(20), rec=rec)
    q, k = torch.meshgrid(torch.arange(20), torch.arange(20), indexing="ij")
    old = k <= q - WINDOW
    for layer in range(cfg.num_hidden_layers):
        pattern = rec.values[f"blocks.{layer}.attn.hook_pattern"][0]  # (H, T, S)
        sliding = cfg.layer_type(layer) == SLIDING
        assert bool((pattern[:, old] == 0).all()) == sliding, layer
        assert torch.allclose(pattern.sum(-1), torch.ones(()))


def generate(model, prompt, n, levers, cached=True):
    from inspector.engine.config import SamplingParams
    from inspector.engine.steps import new_cache
    from inspector.generation import loop
    from inspector.generation.sequence import Sequence

    seq = Sequence(prompt, n, model.config.max_position_embeddings)
    cache = new_cache(model)
    logits = [loop.forward(model, cache, [prompt], levers)[0]]
    loop.choose(seq, logits[0], SamplingParams(), levers)
    while seq.finish is None:
        if cached:
            logits.append(loop.step(seq, model, cache, SamplingParams(), levers)[0])
        else:
            logits.append(loop.forward(model, new_cache(model), [seq.ids], levers)[0])
            loop.choose(seq, logits[-1], SamplingParams(), levers)
    return seq.generated_ids, logits


@pytest.mark.parametrize("iv", [
    Intervention("blocks.0.hook_attn_out_raw", lambda x: x + 0.5, "raw attention shifted"),  # (a scale the post-norm undoes)
    Intervention("blocks.1.attn.hook_k_normed", lambda k: k * 4.0, "normed keys x4"),
    Intervention("blocks.0.attn.hook_pattern", lambda p: torch.zeros_like(p).index_fill(-1, torch.tensor([0]), 1.0),
                 "attend to position 0 only"),
], ids=["post-norm-input", "k-norm", "pattern"])
def test_levers_on_gemma3_cached_equals_recompute(iv):
    _, ours, cfg = pair("gemma3_text", "decode")
    prompt = ids(14, seed=7)[0].tolist()
    check_interventions((iv,), cfg)
    levers = Levers(interventions=(iv,))
    cached, cached_logits = generate(ours, prompt, 16, levers)
    again, again_logits = generate(ours, prompt, 16, levers, cached=False)
    plain, plain_logits = generate(ours, prompt, 16, Levers())
    assert cached == again
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(cached_logits, again_logits))
    assert max(float((a - b).abs().max()) for a, b in zip(cached_logits, plain_logits)) > 1e-3


def test_family_points_are_refused_on_a_llama():
    cfg = hf_pair("llama")[2]
    with pytest.raises(InputError, match="no trace point 'blocks.0.hook_attn_out_raw'"):
        check_interventions((Intervention("blocks.0.hook_attn_out_raw", lambda x: x),), cfg)


@pytest.mark.parametrize("raw, message", [
    ({"model_type": "gemma"}, "model_type='gemma' (supported: llama, qwen2, qwen3, mistral, phi3, gemma2, gemma3_text, "
                              "mixtral, qwen3_moe, olmoe, granitemoe)"),
    ({"model_type": "gemma3", "text_config": {}}, "its text model (model_type gemma3_text) is"),
    ({"model_type": "phi3", "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.75}},
     "partial_rotary_factor=0.75"),
    ({"model_type": "gemma2", "hidden_activation": "gelu"}, "hidden_act='gelu' (supported: silu, gelu_pytorch_tanh)"),
    ({"model_type": "gemma3_text", "layer_types": ["sliding_attention"]}, "layer_types"),
    ({"model_type": "gemma3_text", "sliding_window": None}, "sliding_window=None"),
    ({"model_type": "qwen3", "use_sliding_window": True}, "use_sliding_window=True"),
    ({"model_type": "qwen3", "attention_bias": True}, "attention_bias=True"),
    ({"model_type": "phi3", "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0]}},
     "rope_type='longrope'"),
])
def test_unsupported_configs_name_the_key_and_what_is_supported(raw, message):
    base = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4)
    with pytest.raises(UnsupportedConfigError) as err:
        ModelConfig.from_hf({**base, **raw})
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("case", list(FAMILIES))
def test_config_round_trips_and_names_its_features(case):
    cfg = pair(case)[2]
    assert ModelConfig.from_hf(cfg.to_hf()) == cfg
    assert cfg.model_type in FAMILY_FEATURES
