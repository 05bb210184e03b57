"""A TransformerLens user's script, written with public calls only (ids in, an activation cache, a read hook, a
write hook, a head ablation, the lens on a chosen token), gives `transformers`' numbers on the same weights
(eager attention; transformers' own forward hooks play the hooks' part there)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.support.tiny import make_tiny_checkpoint

import inspector

TOL = 2e-5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    import transformers

    directory = make_tiny_checkpoint(tmp_path_factory.mktemp("tl") / "llama")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    return inspector.load(directory), hf


def hf_run(hf, ids, layer_out=None, pre=None):
    """transformers' logits (T, V), every decoder layer's output (L, T, D) and attentions, with forward hooks:
    `layer_out` {module: fn(output) -> output}, `pre` {module: fn(input) -> input}."""
    outs, handles = [], []
    for layer in hf.model.layers:
        handles.append(layer.register_forward_hook(
            lambda m, a, o: outs.append((o[0] if isinstance(o, tuple) else o)[0].clone())))
    for module, fn in (layer_out or {}).items():
        handles.append(module.register_forward_hook(lambda m, a, o, fn=fn: fn(o)))
    for module, fn in (pre or {}).items():
        handles.append(module.register_forward_pre_hook(lambda m, a, fn=fn: (fn(a[0]),)))
    try:
        with torch.no_grad():
            out = hf(torch.tensor([ids]), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    return out.logits[0].numpy(), torch.stack(outs[-len(hf.model.layers):]), [a[0].numpy() for a in out.attentions]


def close(a, b, tol=TOL) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max())


def test_a_transformer_lens_script_equals_transformers(pair):
    model, hf = pair
    cfg = model.config
    d, L = cfg.head_dim, cfg.num_hidden_layers
    rng = np.random.default_rng(0)
    seq = rng.integers(3, cfg.vocab_size, 12)
    ids = np.concatenate([seq, seq])  # random tokens repeated: an induction experiment's input
    want_logits, want_resid, want_attn = hf_run(hf, ids.tolist())

    # ids in, an activation cache
    run = model.prefill(ids=ids, max_new_tokens=2)
    cache = run.cache(["blocks.*.hook_resid_post", "blocks.*.attn.hook_pattern"], step=0)
    for layer in range(L):
        assert close(cache[f"blocks.{layer}.hook_resid_post"], want_resid[layer]), layer
        assert close(cache[f"blocks.{layer}.attn.hook_pattern"].transpose(1, 0, 2), want_attn[layer]), layer
    assert close(run.logits(0, position="all"), want_logits)
    # the induction score of every head from the cached pattern: query i reads key i - n + 1
    n = len(seq)
    pattern = cache["blocks.1.attn.hook_pattern"]  # (T, H, S)
    ours = np.stack([pattern[i, :, i - n + 1] for i in range(n, 2 * n)]).mean(0)
    theirs = np.stack([want_attn[1][:, i, i - n + 1] for i in range(n, 2 * n)], axis=1).mean(1)
    assert close(ours, theirs)

    # a read hook: the residual entering layer 1 is layer 0's output
    seen = {}
    model.prefill(ids=ids, max_new_tokens=1, hooks={"blocks.1.hook_resid_pre": lambda v, h: seen.setdefault(h.step, v.clone())})
    assert close(seen[0][0], want_resid[0])

    # a write hook: no MLP output in layer 0
    zeroed = model.prefill(ids=ids, max_new_tokens=1, hooks={"blocks.0.hook_mlp_out": lambda v, h: torch.zeros_like(v)})
    want, _, _ = hf_run(hf, ids.tolist(), layer_out={hf.model.layers[0].mlp: torch.zeros_like})
    assert close(zeroed.logits(0, position="all"), want) and not close(want, want_logits)

    # a head ablation: head 2 of layer 1 off (its slice of o_proj's input zeroed)
    def off(x):
        x = x.clone()
        x[..., 2 * d:3 * d] = 0
        return x

    ablated = model.prefill(ids=ids, max_new_tokens=1, ablate_head=(1, 2))
    want, _, _ = hf_run(hf, ids.tolist(), pre={hf.model.layers[1].self_attn.o_proj: off})
    assert close(ablated.logits(0, position="all"), want) and not close(want, want_logits)

    # the lens on a chosen token, at the last position and at an earlier one
    for position in (-1, 5):
        token = int(ids[position + 1]) if position >= 0 else int(ids[0])
        got = run.lens(0, position=position, token=token)
        with torch.no_grad():
            lens_logits = hf.lm_head(hf.model.norm(want_resid[:, position]))  # (L, V)
        probs = torch.softmax(lens_logits, -1)[:, token].numpy()
        ranks = (lens_logits > lens_logits[:, token:token + 1]).sum(-1).numpy()
        assert close(got.probs, probs) and got.ranks.tolist() == ranks.tolist(), position
