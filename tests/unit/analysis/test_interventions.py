"""The named interventions against transformers on the same weights, each made there by a forward hook or
mask; cached decoding equal to recomputation under each over 64 decode steps; bad input as one line."""

from __future__ import annotations

import pytest
import torch

from inspector.errors import InputError
from inspector.generation import interventions as ivs
from inspector.generation.levers import Levers
from tests.support.engine_fixtures import hf_pair
from tests.support.generation import PROMPT, generate, hf_greedy

N = 16


@pytest.fixture(scope="module")
def pair():
    return hf_pair("llama", layout="decode")


def hf_run(hf, module, hook, prompt, ids, pre=True):
    """Greedy ids from transformers and its logits over prompt + ids[:-1], with `hook` on `module`."""
    handle = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
    try:
        greedy = hf_greedy(hf, prompt, len(ids))
        with torch.no_grad():
            ref = hf(torch.tensor([prompt + ids[:-1]])).logits[0]
    finally:
        handle.remove()
    return greedy, ref


def check_equal(ours_ids, ours_logits, greedy, ref, prompt):
    assert ours_ids == greedy
    for k, lg in enumerate(ours_logits):
        assert float((lg - ref[len(prompt) - 1 + k]).abs().max()) <= 1e-4, k


def o_proj_input_edit(head, d, edit):
    def hook(module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = edit(x[..., head * d:(head + 1) * d])
        return (x,)
    return hook


@pytest.mark.parametrize("op", ["zero", "scale", "mean"])
def test_head_operations_equal_transformers_with_a_hook(pair, op):
    hf, ours, cfg = pair
    L, h, d = 1, 2, cfg.head_dim
    mean = ivs.head_mean(ours, PROMPT, L, h) if op == "mean" else None
    levers = Levers(interventions=ivs.head(cfg, L, h, op, factor=-2.0, mean=mean))
    ids, logits = generate(ours, PROMPT, N, levers)
    assert ids != generate(ours, PROMPT, N)[0]
    edit = {"zero": lambda x: x * 0, "scale": lambda x: x * -2.0, "mean": lambda x: mean.expand_as(x)}[op]
    check_equal(ids, logits, *hf_run(hf, hf.model.layers[L].self_attn.o_proj, o_proj_input_edit(h, d, edit),
                                     PROMPT, ids), PROMPT)


def test_head_mean_is_the_mean_of_its_output_over_the_prompt(pair):
    hf, ours, cfg = pair
    L, h, d = 2, 1, cfg.head_dim
    seen = {}
    handle = hf.model.layers[L].self_attn.o_proj.register_forward_pre_hook(lambda m, a: seen.setdefault("z", a[0]))
    try:
        with torch.no_grad():
            hf(torch.tensor([PROMPT]))
    finally:
        handle.remove()
    want = seen["z"][0, :, h * d:(h + 1) * d].mean(0)
    assert torch.allclose(ivs.head_mean(ours, PROMPT, L, h), want, atol=1e-5)


@pytest.mark.parametrize("point", ["mlp_out", "attn_out"])
def test_component_ablation_equals_transformers_with_a_hook(pair, point):
    hf, ours, cfg = pair
    L = 1
    levers = Levers(interventions=ivs.component(cfg, point, L, "zero"))
    ids, logits = generate(ours, PROMPT, N, levers)
    assert float((logits[0] - generate(ours, PROMPT, 1)[1][0]).abs().max()) > 1e-3
    layer = hf.model.layers[L]
    module = layer.mlp if point == "mlp_out" else layer.self_attn

    def hook(mod, args, out):
        return out * 0 if point == "mlp_out" else (out[0] * 0, *out[1:])

    check_equal(ids, logits, *hf_run(hf, module, hook, PROMPT, ids, pre=False), PROMPT)


def test_steering_equals_transformers_with_a_hook(pair):
    hf, ours, cfg = pair
    L = 1
    vec = ivs.steering_vector(ours, [5, 6, 7, 8], [200, 201, 202], L)
    levers = Levers(interventions=ivs.steer(cfg, L, vec, 4.0))
    ids, logits = generate(ours, PROMPT, N, levers)
    assert ids != generate(ours, PROMPT, N)[0]

    def pre(mod, args, kwargs):
        if args:
            return (args[0] + 4.0 * vec, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + 4.0 * vec}

    handle = hf.model.layers[L].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        greedy = hf_greedy(hf, PROMPT, N)
        with torch.no_grad():
            ref = hf(torch.tensor([PROMPT + ids[:-1]])).logits[0]
    finally:
        handle.remove()
    check_equal(ids, logits, greedy, ref, PROMPT)


def test_blocking_attention_equals_transformers_with_the_same_mask(pair):
    """Query position q (a decode position) never reads key position k, in every layer: transformers
    computes the whole sequence at once with that 4-D mask."""
    hf, ours, _ = pair
    q, k = len(PROMPT) + 2, 0
    levers = Levers(interventions=ivs.block_attention(ours.config, q, k))
    ids, logits = generate(ours, PROMPT, N, levers)
    plain, plain_logits = generate(ours, PROMPT, N)
    assert float((logits[3] - plain_logits[3]).abs().max()) > 1e-3 and torch.equal(logits[2], plain_logits[2])
    full = PROMPT + ids[:-1]
    T = len(full)
    allowed = torch.ones(T, T).tril().bool()
    allowed[q, k] = False
    mask = torch.zeros(1, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        ref = hf(torch.tensor([full]), attention_mask=mask).logits[0]
    for j, lg in enumerate(logits):
        assert float((lg - ref[len(PROMPT) - 1 + j]).abs().max()) <= 1e-4, j


MAKERS = {
    "head-zero": lambda m: ivs.head(m.config, 0, 1, "zero"),
    "head-scale": lambda m: ivs.head(m.config, 2, 3, "scale", factor=3.0),
    "head-mean": lambda m: ivs.head(m.config, 1, 0, "mean", mean=ivs.head_mean(m, PROMPT, 1, 0)),
    "mlp": lambda m: ivs.component(m.config, "mlp_out", 2, "scale", factor=0.25),
    "attn": lambda m: ivs.component(m.config, "attn_out", 0, "zero"),
    "block-prompt": lambda m: ivs.block_attention(m.config, 9, 0, layer=0),
    "block-decode": lambda m: ivs.block_attention(m.config, len(PROMPT) + 5, 1),
    "steer": lambda m: ivs.steer(m.config, 2, ivs.steering_vector(m, [1, 2, 3], [9, 8], 2), 2.0),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_cached_equals_recompute_under_each_intervention_over_64_steps(pair, name):
    _, ours, _ = pair
    levers = Levers(interventions=MAKERS[name](ours))
    cached, cached_logits = generate(ours, PROMPT, 65, levers)
    again, again_logits = generate(ours, PROMPT, 65, levers, cached=False)
    assert cached == again
    assert max(float((a - b).abs().max()) for a, b in zip(cached_logits, again_logits)) <= 1e-4
    _, plain_logits = generate(ours, PROMPT, 65)
    assert max(float((a - b).abs().max()) for a, b in zip(cached_logits, plain_logits)) > 5e-4


@pytest.mark.parametrize("call,message", [
    (lambda c: ivs.head(c, 3, 0), "layer must be a whole number from 0 to 2, got 3"),
    (lambda c: ivs.head(c, 0, 4), "head must be a whole number from 0 to 3, got 4"),
    (lambda c: ivs.head(c, 0, 0, "halve"), "unknown head operation 'halve': use one of zero, scale, mean"),
    (lambda c: ivs.head(c, 0, 0, "mean"), "needs its mean output"),
    (lambda c: ivs.head(c, 0, 0, "scale", factor="x"), "factor must be a number in"),
    (lambda c: ivs.component(c, "resid", 0), "unknown component 'resid': use one of attn_out, mlp_out"),
    (lambda c: ivs.block_attention(c, 3, 5), "key position must be a whole number from 0 to 3, got 5"),
    (lambda c: ivs.steer(c, -1, torch.zeros(64), 1.0), "layer must be a whole number from 0 to 2, got -1"),
    (lambda c: ivs.parse_head("5", c), "a head is LAYER.HEAD"),
    (lambda c: ivs.parse_scaled_head("1.1", c), "a scaled head is LAYER.HEAD=FACTOR"),
    (lambda c: ivs.parse_scaled_head("1.1=inf", c), "factor must be a number in"),
])
def test_bad_input_is_one_line_naming_what_is_allowed(pair, call, message):
    _, ours, cfg = pair
    with pytest.raises(InputError, match=None) as info:
        call(cfg)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_empty_steering_prompt_is_one_line(pair):
    _, ours, _ = pair
    with pytest.raises(InputError, match="two non-empty prompts"):
        ivs.steering_vector(ours, [], [1, 2], 0)


@pytest.mark.slow
def test_default_model_head_and_mlp_ablation_equal_transformers(default_model):
    """The real model: head 5.3 and MLP 7 off, 16 greedy tokens and their logits against transformers with
    the same changes made by hooks on the same weights."""
    import transformers

    hf = transformers.LlamaForCausalLM.from_pretrained(
        default_model.weights_path, dtype=torch.float32, attn_implementation="eager").eval()
    ours, cfg = default_model.model, default_model.config
    prompt = default_model.tokenizer.encode("The capital of France is")
    levers = Levers(interventions=ivs.head(cfg, 5, 3) + ivs.component(cfg, "mlp_out", 7))
    ids, logits = generate(ours, prompt, N, levers)
    d = cfg.head_dim
    hooks = [hf.model.layers[5].self_attn.o_proj.register_forward_pre_hook(o_proj_input_edit(3, d, lambda x: x * 0)),
             hf.model.layers[7].mlp.register_forward_hook(lambda m, a, out: out * 0)]
    try:
        with torch.no_grad():
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
            ref = hf(torch.tensor([prompt + ids[:-1]])).logits[0]
        greedy = out[0, len(prompt):].tolist()
    finally:
        for h in hooks:
            h.remove()
    assert ids == greedy
    # 30 fp32 layers: plain cached decoding already differs from transformers' full forward by ~1e-4 (the
    # summation order of one token against many); the ablated run may not differ by more than twice that.
    plain_ids, plain_logits = generate(ours, prompt, N)
    with torch.no_grad():
        plain_ref = hf(torch.tensor([prompt + plain_ids[:-1]])).logits[0]
    plain = max(float((lg - plain_ref[len(prompt) - 1 + k]).abs().max()) for k, lg in enumerate(plain_logits))
    worst = max(float((lg - ref[len(prompt) - 1 + k]).abs().max()) for k, lg in enumerate(logits))
    assert worst <= max(1e-4, 2 * plain), (worst, plain)
