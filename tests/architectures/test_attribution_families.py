"""Direct logit attribution adds up on every family the engine runs, and each part equals the same part
read out of transformers on the same weights.

For each family (tiny random models, fp32, built by `engine_fixtures.hf_pair`; the mixtures of experts from
a checkpoint transformers saved, as `test_moe_parity` loads them): the parts sum to the logit they explain
(the pre-cap logit under Gemma 2's final soft-cap; on Granite the logit after its division by
logits_scaling) within rel 1e-4, with no lever and under interventions (a head ablated, steering, an
attention output scaled, Gemma's o_proj output edited before its post-norm). The reference reads
transformers' own modules through forward hooks: each norm's frozen scale is the ratio of what that norm
module output to what it took in at the last position (so a gain of w where the model uses 1 + w, or a
post-norm left out, would not match), then every head, bias, MLP and the embedding (Gemma's scaled one, as
transformers' embedding module returns it) is read through those ratios onto the token's unembedding row;
the pre-cap logit is transformers' lm_head output, the logit its capped output. On Granite, transformers'
config gives the multipliers its model applies outside those modules (the embedding's, the residual one on
attention's and the MoE block's outputs, the logits' division). The CLI and the views say what was
decomposed and under which condition; the slow tests run the real default model and Gemma 3 270M on "The
capital of France is".
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.engine_fixtures import hf_pair
from inspector.analysis.attribution import attribute
from inspector.analysis.findings import Attribution, LayerParts
from inspector.errors import InputError
from inspector.generation import interventions as ivs
from inspector.generation.levers import Intervention, Levers

IDS = [5, 17, 99, 3, 42, 7, 250, 11, 64, 8]
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
CASES = {  # name -> (model_type, config overrides): one per family, plus the bias and soft-cap variants
    "llama": ("llama", {}),
    "llama-bias": ("llama", dict(attention_bias=True)),  # q/k/v and o_proj biases: the o_proj bias is a part
    "qwen2": ("qwen2", {}),  # q/k/v biases (the v bias rides inside each head's z)
    "qwen3": ("qwen3", dict(head_dim=16)),
    "mistral": ("mistral", dict(head_dim=16, sliding_window=4)),
    "phi3": ("phi3", dict(**SPECIAL)),
    "gemma2": ("gemma2", dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=24, attn_logit_softcapping=4.0,
                              final_logit_softcapping=2.0, **SPECIAL)),
    "gemma2-tied": ("gemma2", dict(head_dim=16, query_pre_attn_scalar=16, tie_word_embeddings=True, **SPECIAL)),
    "gemma3_text": ("gemma3_text", dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=16, **SPECIAL)),
}
GRANITE = dict(embedding_multiplier=3.0, residual_multiplier=0.4, attention_multiplier=0.07, logits_scaling=2.5)
GRANITE_STATED = {k: GRANITE[k] for k in ("embedding_multiplier", "residual_multiplier", "logits_scaling")}
MOE_CASES = {  # name -> (model_type, config overrides): odd expert counts, top-k 1 to 3, Granite's multipliers
    "mixtral": ("mixtral", dict(num_local_experts=5, num_experts_per_tok=2)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=40)),
    "olmoe": ("olmoe", dict(num_experts=5, num_experts_per_tok=1, norm_topk_prob=True)),
    "granitemoe": ("granitemoe", dict(num_local_experts=5, num_experts_per_tok=2, **GRANITE)),
}
STEER_LAYER, HEAD = 1, (1, 2)


@pytest.fixture(scope="module", params=list(CASES) + list(MOE_CASES))
def case(request, tmp_path_factory):
    if request.param in MOE_CASES:
        return moe_pair(*MOE_CASES[request.param], tmp_path_factory.mktemp("moe") / request.param)
    model_type, overrides = CASES[request.param]
    return hf_pair(model_type, layout="decode", **overrides)


def moe_pair(model_type: str, overrides: dict, directory):
    """(transformers model, our model, config) on one tiny random checkpoint: transformers 5 stacks a mixture's
    experts in its modules, so the weights travel through the checkpoint's names, as the Hub's do."""
    import transformers

    from inspector.models.loader import load_model
    from tests.support.tiny import make_tiny_checkpoint

    make_tiny_checkpoint(directory, model_type=model_type, tie=False, init_std=0.1, num_hidden_layers=3, **overrides)
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    loaded = load_model(str(directory))
    return hf, loaded.model, loaded.config


def close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= 1e-4 * max(1.0, abs(scale))


def levers_for(name: str, ours) -> Levers:
    cfg = ours.config
    if name == "plain":
        return Levers()
    if name == "head-off":
        return Levers(interventions=ivs.head(cfg, *HEAD, "zero"))
    if name == "steer":
        return Levers(interventions=ivs.steer(cfg, STEER_LAYER, steer_vector(cfg.hidden_size), 2.0))
    if name == "attn-scaled":
        return Levers(interventions=ivs.component(cfg, "attn_out", 0, "scale", factor=0.5)
                      + ivs.head(cfg, 2, 0, "scale", factor=-1.5))
    raise ValueError(name)


def steer_vector(D: int) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, D)


@pytest.mark.parametrize("lever", ["plain", "head-off", "steer", "attn-scaled"])
def test_the_parts_sum_to_the_logit_they_explain(case, lever):
    _, ours, cfg = case
    lv = levers_for(lever, ours)
    a = attribute(ours, IDS, levers=lv)
    assert close(a.total, a.explained, a.explained), (a.total, a.explained)
    assert len(a.layers) == cfg.num_hidden_layers and all(len(lp.heads) == cfg.num_attention_heads for lp in a.layers)
    if lever == "plain":  # nothing but the model's own parts
        assert abs(a.other) < 1e-5 and all(abs(lp.attn_rest) < 1e-5 for lp in a.layers)
        granite = cfg.model_type == "granitemoe"  # its multipliers are stated where the frozen scales are
        assert (a.to_json()["multipliers"] == GRANITE_STATED) if granite else a.multipliers is None
        assert ("×0.4 before the residual adds it, the logit ÷2.5" in a.condition()) == granite
    if lever == "head-off":
        assert a.layers[HEAD[0]].heads[HEAD[1]] == 0.0
    if lever == "attn-scaled":  # half of layer 0's attention output was taken away after its heads wrote it
        lp = a.layers[0]
        assert lp.attn_rest == pytest.approx(-0.5 * (sum(lp.heads) + lp.attn_bias), abs=1e-5)
    has_bias = cfg.o_bias
    assert all((lp.attn_bias != 0.0) == has_bias for lp in a.layers)


@torch.no_grad()
def hf_reference(hf, ids: list[int], t: int, gemma: bool, hooks: list) -> dict:
    """Every part of token t's logit read out of transformers' modules (see the module docstring)."""
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name: str):
        def hook(module, args, out):
            seen[name] = (args[0][0, -1].double(), (out[0] if isinstance(out, tuple) else out)[0, -1].double())
        return hook

    handles = [hf.model.embed_tokens.register_forward_hook(keep("embed")),
               hf.model.norm.register_forward_hook(keep("final")), hf.lm_head.register_forward_hook(keep("lm_head"))]
    for i, layer in enumerate(hf.model.layers):
        handles.append(layer.self_attn.o_proj.register_forward_hook(keep(f"o_proj {i}")))
        if gemma:
            handles.append(layer.post_attention_layernorm.register_forward_hook(keep(f"post_attn {i}")))
            handles.append(layer.post_feedforward_layernorm.register_forward_hook(keep(f"mlp {i}")))
        else:  # Granite's mixture of experts is `block_sparse_moe`; every other family's MLP is `mlp`
            mlp = layer.block_sparse_moe if hasattr(layer, "block_sparse_moe") else layer.mlp
            handles.append(mlp.register_forward_hook(keep(f"mlp {i}")))
    handles += [register(hf) for register in hooks]
    try:
        logits = hf(torch.tensor([ids])).logits[0, -1].double()
    finally:
        for h in handles:
            h.remove()
    final_in, final_out = seen["final"]
    # Granite's constants, applied by its model outside the modules hooked here (1 on the other families)
    e, m, s = (getattr(hf.config, k, 1.0) for k in ("embedding_multiplier", "residual_multiplier", "logits_scaling"))
    # the final norm's frozen map, as transformers ran it, and Granite's division of the logits
    u = hf.lm_head.weight[t].double() * (final_out / final_in) / s
    H = hf.config.num_attention_heads
    d = hf.model.layers[0].self_attn.o_proj.in_features // H
    layers = []
    for i, layer in enumerate(hf.model.layers):
        o_proj = layer.self_attn.o_proj
        z = seen[f"o_proj {i}"][0]  # (H*d,)
        post = seen[f"post_attn {i}"][1] / seen[f"post_attn {i}"][0] if gemma else torch.ones_like(u)
        w = o_proj.weight.double()  # (D, H*d)
        heads = [float(u @ (m * post * (w[:, h * d:(h + 1) * d] @ z[h * d:(h + 1) * d]))) for h in range(H)]
        bias = 0.0 if o_proj.bias is None else float(u @ (m * post * o_proj.bias.double()))
        layers.append((heads, bias, float(u @ (m * seen[f"mlp {i}"][1]))))
    return {"embed": float(u @ (e * seen["embed"][1])), "layers": layers, "precap": float(seen["lm_head"][1][t]) / s,
            "logit": float(logits[t])}


def hf_hooks(name: str, hf, d: int) -> list:
    """The lever `name` applied to transformers' model, as registrations to make."""
    if name == "head-off":
        L, h = HEAD

        def zero(module, args):
            z = args[0].clone()
            z[..., h * d:(h + 1) * d] = 0.0
            return (z,)
        return [lambda m: m.model.layers[L].self_attn.o_proj.register_forward_pre_hook(zero)]
    if name == "steer":
        add = 2.0 * steer_vector(hf.config.hidden_size)

        def steer(module, args, kwargs):
            if args:
                return (args[0] + add, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + add}
        return [lambda m: m.model.layers[STEER_LAYER].register_forward_pre_hook(steer, with_kwargs=True)]
    return []


@pytest.mark.parametrize("lever", ["plain", "head-off", "steer"])
def test_every_part_equals_the_same_part_read_out_of_transformers(case, lever):
    hf, ours, cfg = case
    a = attribute(ours, IDS, levers=levers_for(lever, ours))
    ref = hf_reference(hf, IDS, a.token_id, cfg.gemma, hf_hooks(lever, hf, cfg.head_dim))
    scale = ref["precap"]
    assert close(a.logit, ref["logit"], scale) and close(a.explained, ref["precap"], scale)
    assert close(a.embed, ref["embed"], scale)
    for lp, (heads, bias, mlp) in zip(a.layers, ref["layers"]):
        assert all(close(x, y, scale) for x, y in zip(lp.heads, heads)), (lp.heads, heads)
        assert close(lp.attn_bias, bias, scale) and close(lp.mlp, mlp, scale)
    if lever == "steer":  # the added vector, read through the same frozen map, is the `other` part
        assert abs(a.other) > 1e-3


def test_gemma2_decomposes_the_pre_cap_logit_and_reports_the_capped_one():
    hf, ours, cfg = hf_pair("gemma2", layout="decode", **CASES["gemma2"][1])
    cap = cfg.final_logit_softcapping
    a = attribute(ours, IDS)
    assert a.softcap == cap and a.decomposed() == "pre-cap logit"
    assert a.logit == pytest.approx(cap * math.tanh(a.total / cap), abs=1e-5)  # the capped sum is what it samples from
    assert abs(a.explained - a.logit) > 0.05 * abs(a.logit)  # the cap matters at this logit: the two differ
    assert not close(a.total, a.logit, a.logit)
    assert a.post_rms is not None and len(a.post_rms) == cfg.num_hidden_layers
    assert f"{cap:g}·tanh({a.explained:.3f} / {cap:g}) = {a.logit:.3f}" in a.cap_note()
    j = a.to_json()
    assert j["logit_precap"] == a.explained and j["softcap"] == cap and j["decomposes"] == "pre-cap logit"
    assert j["sum"] == pytest.approx(j["logit_precap"], rel=1e-4)
    assert j["frozen_scales"]["post_attention_norm_rms"] == a.post_rms and j["frozen_scales"]["final_norm_rms"] > 0


def test_a_gemma_post_norm_edit_still_adds_up():
    _, ours, cfg = hf_pair("gemma3_text", layout="decode", **CASES["gemma3_text"][1])
    edit = Intervention("blocks.1.hook_attn_out_raw", lambda x: x * 3.0 + 0.1, "raw ×3 +0.1")
    a = attribute(ours, IDS, levers=Levers(interventions=(edit,)))
    assert close(a.total, a.explained, a.explained) and abs(a.layers[1].attn_rest) > 1e-4


def test_an_edit_after_the_final_residual_is_refused_in_one_line():
    _, ours, _ = hf_pair("llama", layout="decode")
    edit = Intervention("ln_final.hook_normalized", lambda x: x * 2.0, "final ×2")
    with pytest.raises(InputError, match="final ×2 edits after it"):
        attribute(ours, IDS, levers=Levers(interventions=(edit,)))


def test_the_views_say_what_is_decomposed_and_what_is_frozen():
    from html import unescape

    from inspector.viz.interventions import dla_figure, dla_html

    layers = [LayerParts([0.5, -2.0], 1.0, attn_bias=0.25)]
    plain = Attribution(7, " Paris", 0.3 + 0.5 - 2.0 + 1.0 + 0.25, 0.3, layers, final_rms=2.0)
    html = unescape(dla_html(plain))
    assert "logit 0.050 = sum of parts" in html and "pre-cap" not in html and "tanh" not in html
    assert "final norm's scale (1/rms) frozen" in html and "post-attention" not in html
    assert "attn 0 bias" in html and 'data-part="attn 0 bias"' not in html  # a bias is a part, not ablatable
    capped = Attribution(7, " Paris", 2.0 * math.tanh(0.05 / 2.0), 0.3, layers, softcap=2.0, logit_precap=0.05,
                         post_rms=[1.5])
    html = unescape(dla_html(capped))
    assert "pre-cap logit 0.050 = sum of parts" in html and "2·tanh(0.050 / 2) = 0.050" in html
    assert "each post-attention norm's scale (1/rms) frozen" in html
    title = dla_figure(capped).layout.title.text
    assert "pre-cap logit 0.050 = sum of parts 0.050" in title and "tanh" in title and "frozen" in title


@pytest.fixture(scope="module")
def tiny_gemma2_dir(tmp_path_factory):
    from tests.support.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("gemma2"), model_type="gemma2", query_pre_attn_scalar=16,
                                attn_logit_softcapping=4.0, final_logit_softcapping=1.0)


def test_the_cli_names_the_pre_cap_logit_and_the_frozen_scales(capsys, tiny_gemma2_dir):
    import json

    from inspector.commands.cli import main

    assert main(["attribute", "--prompt", "Hello world", "--model", str(tiny_gemma2_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["softcap"] == 1.0 and out["decomposes"] == "pre-cap logit"
    assert out["sum"] == pytest.approx(out["logit_precap"], rel=1e-4, abs=1e-5)
    assert out["logit"] == pytest.approx(math.tanh(out["logit_precap"]), abs=1e-5)
    assert len(out["frozen_scales"]["post_attention_norm_rms"]) == len(out["layers"])
    assert main(["attribute", "--prompt", "Hello world", "--model", str(tiny_gemma2_dir)]) == 0
    text = capsys.readouterr().out
    assert f"pre-cap logit {out['logit_precap']:.4f} = sum of parts {out['sum']:.4f}" in text
    assert f"= {out['logit']:.3f}" in text and "frozen at this position's values" in text


@pytest.mark.slow
@pytest.mark.parametrize("name", [None, "gemma3-270m"], ids=["default", "gemma3-270m"])
def test_on_the_real_models_the_parts_sum_to_the_logit(capsys, name):
    import json

    from inspector.commands.cli import main

    args = ["attribute", "--prompt", "The capital of France is", "--json"] + (["--model", name] if name else [])
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sum"] == pytest.approx(out["logit_precap"], rel=1e-3)
    assert out["logit_precap"] == out["logit"] and out["softcap"] is None  # neither model soft-caps its logits
