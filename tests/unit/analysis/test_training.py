"""Training beside inference: teacher-forced losses and one backward pass equal transformers on the same weights.

Tiny random models of every family (`engine_fixtures.hf_pair`), in both weight layouts (one matrix per
module, and q/k/v and gate/up stacked as `load_model` lays them out): per-token losses equal cross-entropy
over transformers' logits and their mean equals its `labels=` loss (within 1e-4); every weight's gradient
norm equals autograd on the transformers model (within 1e-3 relative). The shared model keeps no
`requires_grad` and no `.grad` afterwards and still infers as before. The memory parts add up from the
tensors they name. The `inspector loss` CLI: its --json contract and one line for bad input. The real
default model against transformers (slow).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from tests.support.tiny import CORPUS, make_tiny_checkpoint, tiny_llama_dir  # noqa: F401 (fixture)

from inspector.analysis.training import token_losses, training_step
from inspector.commands.cli import main
from inspector.errors import InputError
from tests.support.engine_fixtures import hf_pair

SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
CASES = {
    "llama-untied": ("llama", dict(num_key_value_heads=2)),
    "llama-tied": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "qwen2-bias": ("qwen2", dict(num_key_value_heads=2)),
    "qwen3": ("qwen3", dict(head_dim=16)),
    "mistral-window": ("mistral", dict(head_dim=16, sliding_window=8)),
    "phi3": ("phi3", dict(**SPECIAL)),
    "gemma2-softcaps": ("gemma2", dict(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, tie_word_embeddings=True,
                                       attn_logit_softcapping=5.0, final_logit_softcapping=2.0, **SPECIAL)),
    "gemma3": ("gemma3_text", dict(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, **SPECIAL,
                                   layer_types=["sliding_attention", "sliding_attention", "full_attention"])),
}


def text_ids(n: int = 24, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def hf_reference(hf, ids: torch.Tensor) -> tuple[float, list[float], dict[str, float]]:
    """transformers' labels= loss, per-token cross-entropy of its logits, and autograd's gradient norm per weight."""
    hf.zero_grad(set_to_none=True)
    out = hf(ids, labels=ids)
    out.loss.backward()
    per_token = torch.nn.functional.cross_entropy(out.logits[0, :-1].detach(), ids[0, 1:], reduction="none")
    norms = {name: float(p.grad.norm()) for name, p in hf.named_parameters()}
    return float(out.loss.detach()), per_token.tolist(), norms


@pytest.mark.parametrize("layout", [None, "decode"])
@pytest.mark.parametrize("case", list(CASES))
def test_losses_and_gradient_norms_equal_transformers(case, layout):
    model_type, overrides = CASES[case]
    hf, ours, cfg = hf_pair(model_type, layout=layout, **overrides)
    ours.requires_grad_(False)  # as load_model leaves it
    ids = text_ids()
    loss, per_token, norms = hf_reference(hf, ids)
    step = training_step(ours, ids[0].tolist())
    got = step.losses
    assert len(got.losses) == ids.shape[1] - 1
    assert max(abs(a - b) for a, b in zip(got.losses, per_token)) <= 1e-4
    assert abs(got.mean_loss - loss) <= 1e-4 and got.perplexity == pytest.approx(math.exp(loss), rel=1e-4)
    assert set(step.grad_norms) == set(norms)  # the same parameter names, tied weights once
    assert max(norms.values()) > 1e-3  # a real gradient, not all zeros
    for name, expected in norms.items():
        assert step.grad_norms[name] == pytest.approx(expected, rel=1e-3, abs=1e-7), name
    for i, layer_norm in enumerate(step.layer_norms):
        mine = [v for n, v in norms.items() if f"layers.{i}." in n]
        assert layer_norm == pytest.approx(math.sqrt(sum(v * v for v in mine)), rel=1e-3)


def test_the_shared_model_keeps_no_gradient_state_and_infers_as_before():
    _, ours, cfg = hf_pair("llama", layout="decode")
    ours.requires_grad_(False)
    ids = text_ids()[0].tolist()
    before, _ = token_losses(ours, ids)
    training_step(ours, ids)
    assert not any(p.requires_grad for p in ours.parameters())
    assert all(p.grad is None for p in ours.parameters())
    after, _ = token_losses(ours, ids)
    assert after.losses == before.losses  # bit for bit: the stacked products are used again
    attn = ours.model.layers[0].self_attn
    from inspector.engine.linear import QKV, stacked_weight
    assert stacked_weight(attn, QKV) is not None
    # A weight that required grad before the step still does after it (the flags are restored, not cleared).
    ours.model.norm.weight.requires_grad_(True)
    training_step(ours, ids)
    assert ours.model.norm.weight.requires_grad and ours.model.norm.weight.grad is None
    assert not ours.model.layers[0].mlp.down_proj.weight.requires_grad


def test_memory_parts_are_counted_from_the_tensors():
    _, ours, cfg = hf_pair("llama", layout="decode")
    ours.requires_grad_(False)
    short, long = (training_step(ours, text_ids(n)[0].tolist()) for n in (16, 64))
    n_params = sum(p.numel() for p in ours.parameters())
    parts = {m.label: m for m in long.training_memory}
    assert parts["weights"].bytes == n_params * 4 and parts["weights"].how == "measured"
    assert parts["gradients"].bytes == n_params * 4 and parts["gradients"].how == "measured"
    assert parts["Adam moments"].bytes == 2 * n_params * 4 and parts["Adam moments"].how == "formula"
    kv = {m.label: m for m in long.inference_memory}["KV cache"]
    assert kv.bytes == 64 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    # Activations grow with the text (every position's values are kept for the backward); weights do not count.
    short_acts = {m.label: m for m in short.training_memory}["activations kept for backward"].bytes
    assert 0 < short_acts < parts["activations kept for backward"].bytes


def test_too_short_and_too_long_texts_are_refused_before_model_work():
    _, ours, cfg = hf_pair("llama")
    with pytest.raises(InputError, match="at least 2 tokens"):
        training_step(ours, [5])
    with pytest.raises(InputError, match="context window is 256 tokens"):
        token_losses(ours, [5] * 257)
    with pytest.raises(InputError, match="the most this view teacher-forces is 20 tokens"):
        training_step(ours, [5] * 21, limit=20)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("loss") / "text.txt"
    path.write_text(" ".join(CORPUS[:3]), encoding="utf-8")
    return path


def test_cli_json_contract(capsys, tiny_llama_dir, text_file):  # noqa: F811
    base = ["loss", "--model", str(tiny_llama_dir), "--text-file", str(text_file), "--json"]
    assert main(base) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"token_ids", "losses", "mean_loss", "perplexity"}
    assert len(out["losses"]) == len(out["token_ids"]) - 1 > 10
    assert out["mean_loss"] == pytest.approx(sum(out["losses"]) / len(out["losses"]), rel=1e-9)
    assert out["perplexity"] == pytest.approx(math.exp(out["mean_loss"]))
    assert main(base + ["--grad-norms"]) == 0
    grads = json.loads(capsys.readouterr().out)
    assert grads["losses"] == pytest.approx(out["losses"], abs=1e-5)
    assert "model.layers.0.self_attn.q_proj.weight" in grads["grad_norms"]
    assert {m["how"] for m in grads["memory"]["training_step"]} == {"measured", "formula"}


def one_line_error(capsys, args: list[str]) -> str:
    assert main(["loss", *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_cli_bad_text_files(capsys, tmp_path, tiny_llama_dir):  # noqa: F811
    empty, latin1, long = tmp_path / "empty.txt", tmp_path / "latin1.txt", tmp_path / "long.txt"
    empty.write_text("  \n", encoding="utf-8")
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    long.write_text(" ".join(CORPUS) * 4, encoding="utf-8")
    base = ["--model", str(tiny_llama_dir), "--text-file"]
    assert "is empty" in one_line_error(capsys, base + [str(empty)])
    assert "is not UTF-8 (byte 3)" in one_line_error(capsys, base + [str(latin1)])
    assert "cannot read text file" in one_line_error(capsys, base + [str(tmp_path / "missing.txt")])
    small = make_tiny_checkpoint(tmp_path / "ctx", max_position_embeddings=32)
    capsys.readouterr()  # the checkpoint writer's progress bar
    err = one_line_error(capsys, ["--model", str(small), "--text-file", str(long), "--grad-norms"])
    assert "the model's context window is 32 tokens" in err


@pytest.mark.slow
def test_default_model_losses_and_gradient_norms_equal_transformers(default_model):
    import transformers

    hf = transformers.LlamaForCausalLM.from_pretrained(
        default_model.weights_path, dtype=torch.float32, attn_implementation="eager").train(False)
    ids = default_model.tokenizer.prompt_ids("Gravity pulls every mass towards every other mass, the Moon too.", False)
    loss, per_token, norms = hf_reference(hf, torch.tensor([ids]))
    step = training_step(default_model.model, ids)
    assert max(abs(a - b) for a, b in zip(step.losses.losses, per_token)) <= 1e-4
    assert abs(step.losses.mean_loss - loss) <= 1e-4
    assert set(step.grad_norms) == set(norms)
    for name, expected in norms.items():
        assert step.grad_norms[name] == pytest.approx(expected, rel=1e-3, abs=1e-6), name
    assert not any(p.requires_grad for p in default_model.model.parameters())
