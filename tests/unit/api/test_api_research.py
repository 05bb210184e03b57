"""The Python API as a researcher uses it (issue 43), on a tiny model: token ids in everywhere, an activation
cache with globs and a byte count before capture, hooks that read and write, the lens and every other analysis
only when asked, distributions at any position, Python's argument rules, trace files that keep the levers,
and a model whose embedding has more rows than its tokenizer has pieces."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from tests.support.tiny import make_tiny_checkpoint, tiny_llama_dir  # noqa: F401 (fixture)

import inspector
from inspector.api.hooks import HookError
from inspector.commands.cli import main
from inspector.errors import InputTypeError
from inspector.session.records import commitment_layer

IDS = [5, 77, 301, 14, 99, 230, 61, 150, 42, 7]


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


@pytest.fixture(scope="module")
def run(model):
    r = model.prefill(ids=IDS, max_new_tokens=8)
    r.step(3)
    return r  # steps 0..3


def one_line(exc) -> str:
    message = str(exc.value)
    assert message and "\n" not in message, message
    return message


# ---- ids in
def test_ids_in_equal_text_in(model):
    text = "The quick brown fox"
    ids = model.tokenize(text)
    a, b = model.prefill(text, max_new_tokens=4), model.prefill(ids=np.array(ids), max_new_tokens=4)
    a.step(2), b.step(2)
    assert a.prompt_ids == b.prompt_ids == ids and a.generated_ids == b.generated_ids
    assert np.array_equal(a.logits(2), b.logits(2))
    assert model.loss(ids=ids).losses == model.loss(text).losses
    assert model.attribute(ids=ids).total == model.attribute(text).total
    # every analysis takes ids= too
    other = model.tokenize("The quick brown dog")
    assert model.patch(ids, other, 5, 6).matrix == model.patch(text, "The quick brown dog", 5, 6).matrix
    assert model.kv_eval(ids=ids, policy="window", budget=2)["kl_mean"] == model.kv_eval(text, policy="window", budget=2)["kl_mean"]
    assert (model.quant(ids=ids, quant="int8", max_new_tokens=3).summary()["kl_mean"]
            == model.quant(text, quant="int8", max_new_tokens=3).summary()["kl_mean"])
    beams = model.beam_search(ids=ids, num_beams=2, max_new_tokens=3), model.beam_search(text, num_beams=2, max_new_tokens=3)
    assert beams[0].prompt_ids == beams[1].prompt_ids and beams[0].hypotheses == beams[1].hypotheses


@pytest.mark.parametrize("kwargs, kind, expected", [
    ({}, inspector.InputError, "either prompt"),
    ({"prompt": "x", "ids": [1]}, inspector.InputError, "not both"),
    ({"ids": []}, ValueError, "ids is empty"),
    ({"ids": [1, 320]}, ValueError, "token ids are whole numbers from 0 to 319, got 320"),
    ({"ids": [1, 2.0]}, TypeError, "float"),
    ({"ids": "1 2 3"}, TypeError, "list of token ids"),
    ({"ids": [1, 2], "chat": True}, inspector.InputError, "fed as given"),
    ({"prompt": 42}, TypeError, "prompt must be a string"),
    ({"prompt": ""}, ValueError, "prompt is empty"),
])
def test_prefill_refuses_bad_prompts_in_one_line(model, kwargs, kind, expected):
    with pytest.raises(kind) as exc:
        model.prefill(**kwargs)
    assert expected in one_line(exc) and isinstance(exc.value, inspector.InputError)


def test_head_scores_of_given_ids_equal_the_probes(model):
    atlas = model.head_scores(probe_len=6, probes=2, seed=1)
    given = model.head_scores(ids=atlas.probe.ids)
    for role in atlas.scores:
        assert np.allclose(given.scores[role], atlas.scores[role], atol=1e-6), role
    assert given.probe.n == 6 and given.probe.seed is None
    with pytest.raises(inspector.InputError, match="repeated once"):
        model.head_scores(ids=[5, 6, 7, 8, 9])


# ---- the lens and the rest only when asked
def test_a_plain_run_computes_no_lens_until_asked(run):
    assert all(rec.logit_lens == [] and rec.commitment is None for rec in run.records)
    found = run.commitment(2)
    assert run.records[2].commitment == [found.layer, found.token_id]
    top1 = run.lens(2).argmax(axis=-1)
    assert found.layer == commitment_layer(top1.tolist()) and found.token_id == top1[-1]


def test_distributions_at_every_position(run):
    every = run.logits(0, position="all")
    assert every.shape == (len(IDS), run.model.config.vocab_size) and every.dtype == np.float32
    assert np.abs(every[-1] - run.logits(0)).max() < 1e-5
    assert np.array_equal(run.logits(0, position=3), every[3]) and np.array_equal(run.logits(2, position=0), run.logits(2))
    p = run.probs(1)
    assert abs(p.sum() - 1) < 1e-5 and np.allclose(np.log(p), run.logprobs(1), atol=1e-5)
    top = run.top(1, n=4)
    assert [t.id for t in top] == np.argsort(-run.logits(1))[:4].tolist()
    assert abs(top[0].prob - p[top[0].id]) < 1e-6
    assert run.records[1].logits.dtype == np.float16  # the views' copy; run.logits is the float32 sampling read


def test_the_lens_reads_every_layer_and_any_token(run):
    L = run.model.config.num_hidden_layers
    dist = run.lens(1)
    assert dist.shape == (L, run.model.config.vocab_size) and np.allclose(dist.sum(-1), 1, atol=1e-5)
    assert np.allclose(dist[-1], run.probs(1), atol=1e-6)  # the last row is the step's own distribution
    assert [row[0].id for row in run.logit_lens(1)] == dist.argmax(-1).tolist()
    t = int(np.argsort(-dist[0])[7])
    one = run.lens(1, token=t)
    assert one.ranks[0] == 7 and np.allclose(one.probs, dist[:, t])
    # another position of the prefill: the lens of its residuals, read from the cache
    cache = run.cache("blocks.*.hook_resid_post", step=0)
    mid = run.lens(0, position=4)
    unembed = run.session.model.unembed
    want = torch.softmax(unembed(torch.from_numpy(np.stack([cache[n][4] for n in cache]))).float(), -1).numpy()
    assert np.allclose(mid, want, atol=1e-5)


# ---- the activation cache
def test_cache_globs_shapes_and_byte_count(run):
    names = ["blocks.*.hook_resid_post", "blocks.1.attn.hook_pattern", "blocks.0.attn.hook_q", "blocks.0.attn.hook_z",
             "unembed.hook_logits"]
    for step, T in ((0, len(IDS)), (2, 1)):
        cache = run.cache(names, step=step)
        assert list(cache) == ["blocks.0.attn.hook_q", "blocks.0.attn.hook_z", "blocks.0.hook_resid_post",
                               "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post", "unembed.hook_logits"]
        S = run.record(step).positions.stop
        assert cache["blocks.1.attn.hook_pattern"].shape == (T, 4, S)
        assert cache["blocks.0.attn.hook_q"].shape == (T, 4, 16) and cache["blocks.0.attn.hook_z"].shape == (T, 64)
        assert sum(a.nbytes for a in cache.values()) == run.cache_nbytes(names, step)
        # the step's own numbers: the norms its record kept
        norms = np.linalg.norm(cache["blocks.1.hook_resid_post"], axis=-1)
        assert np.allclose(norms, run.records[step].resid_post[1], rtol=1e-5)
        assert np.abs(cache["unembed.hook_logits"][-1] - run.logits(step)).max() < 1e-5


def test_cache_refusals(run):
    with pytest.raises(inspector.InputError) as exc:
        run.cache("blocks.*.hook_resid_post", step=0, max_bytes=1000)
    need = run.cache_nbytes("blocks.*.hook_resid_post", 0)
    assert f"{need / 1024:.1f} KiB" in one_line(exc) and "1000 B" in str(exc.value)
    with pytest.raises(inspector.InputError) as exc:
        run.cache("blocks.*.hook_resid_pots")
    assert "nearest: " in one_line(exc) and "blocks.0.hook_resid_post" in str(exc.value)


# ---- hooks
def test_read_hooks_see_where_they_fire_and_change_nothing(model):
    seen = []
    plain = model.prefill(ids=IDS, max_new_tokens=4)
    hooked = model.prefill(ids=IDS, max_new_tokens=4, hooks={
        "blocks.1.hook_resid_pre": lambda v, h: seen.append((h.name, h.step, h.position, list(h.positions), v.shape))})
    plain.step(2), hooked.step(2)
    n = len(IDS)
    assert seen == [("blocks.1.hook_resid_pre", 0, 0, list(range(n)), (1, n, 64)),
                    ("blocks.1.hook_resid_pre", 1, n, [n], (1, 1, 64)),
                    ("blocks.1.hook_resid_pre", 2, n + 1, [n + 1], (1, 1, 64))]
    assert all(np.array_equal(plain.logits(k), hooked.logits(k)) for k in range(3))
    again = model.prefill(ids=IDS, max_new_tokens=4)  # no hook outlives its run
    again.step(2)
    assert len(seen) == 3 and np.array_equal(again.logits(2), plain.logits(2))


def test_a_write_hook_equals_the_same_intervention(model):
    d = model.config.head_dim

    def zero_head(z, hook):
        z = z.clone()
        z[..., 3 * d:4 * d] = 0
        return z

    hooked = model.prefill(ids=IDS, max_new_tokens=4, hooks={"blocks.1.attn.hook_z": zero_head})
    ablated = model.prefill(ids=IDS, max_new_tokens=4, ablate_head=(1, -1))
    hooked.step(2), ablated.step(2)
    assert hooked.generated_ids == ablated.generated_ids
    assert all(np.abs(hooked.logits(k) - ablated.logits(k)).max() < 1e-6 for k in range(3))
    assert not np.array_equal(hooked.logits(0), model.prefill(ids=IDS, max_new_tokens=4).logits(0))


def test_a_raising_hook_stops_one_step_and_the_run_goes_on(model):
    calls = {"n": 0}

    def flaky(v, hook):
        calls["n"] += 1
        if hook.step == 2 and calls["n"] == 3:
            raise ZeroDivisionError("boom")

    run = model.prefill(ids=IDS, max_new_tokens=6, hooks={"blocks.0.hook_mlp_out": flaky})
    run.step()
    with pytest.raises(HookError) as exc:
        run.step()
    assert one_line(exc) == "hook test_a_raising_hook_stops_one_step_and_the_run_goes_on.<locals>.flaky at " \
                            "blocks.0.hook_mlp_out, step 2, raised ZeroDivisionError: boom"
    assert isinstance(exc.value.__cause__, ZeroDivisionError)
    assert run.num_forwards == 2 and run.figure("kv").data  # at its last step, readable
    run.step(2)
    plain = model.prefill(ids=IDS, max_new_tokens=6)
    plain.step(3)
    assert run.generated_ids == plain.generated_ids and np.array_equal(run.logits(3), plain.logits(3))


@pytest.mark.parametrize("hook, expected", [
    (lambda v, h: v[..., :3], "returned (1, 10, 3) float32; the value is (1, 10, 64) float32"),
    (lambda v, h: v.double(), "returned (1, 10, 64) float64; the value is (1, 10, 64) float32"),
    (lambda v, h: v.numpy(), "returned ndarray"),
])
def test_a_hook_returning_the_wrong_thing_is_refused_in_one_line(model, hook, expected):
    with pytest.raises(inspector.InputError) as exc:
        model.prefill(ids=IDS, hooks={"blocks.0.hook_resid_post": hook})
    assert expected in one_line(exc) and "step 0" in str(exc.value)


def test_hook_names_are_checked(model):
    with pytest.raises(inspector.InputError) as exc:
        model.prefill(ids=IDS, hooks={"blocks.0.hook_resid_postt": lambda v, h: None})
    assert "nearest: blocks.0.hook_resid_post" in one_line(exc)
    with pytest.raises(TypeError):
        model.prefill(ids=IDS, hooks={"blocks.0.hook_resid_post": 3})
    assert model.hook_names()[0] == "hook_embed" and "blocks.1.attn.hook_pattern" in model.hook_names()


# ---- arguments as in Python
def test_numpy_integers_and_negative_indices(run, model):
    assert np.array_equal(run.logits(np.int64(1)), run.logits(1)) and np.array_equal(run.logits(-1), run.logits(3))
    assert np.array_equal(run.attention(np.int32(-1), step=np.int64(0)), run.attention(1, step=0))
    a = model.prefill(ids=IDS, seed=np.int64(3), temperature=0.9, max_new_tokens=2)
    b = model.prefill(ids=IDS, seed=3, temperature=0.9, max_new_tokens=2)
    assert a.generated_ids == b.generated_ids
    assert np.array_equal(run.lens(1, token=np.int64(5)).probs, run.lens(1, token=5).probs)
    for bad in ("2", 1.0, True):
        with pytest.raises(TypeError) as exc:
            run.logits(bad)
        assert isinstance(exc.value, inspector.InputError) and "step must be an int" in one_line(exc)
    with pytest.raises(ValueError):
        run.logits(9)
    assert issubclass(inspector.InputError, ValueError) and issubclass(InputTypeError, TypeError)


def test_ablate_head_takes_one_pair_or_a_list_and_mean(model):
    one = model.prefill(ids=IDS, max_new_tokens=2, ablate_head=(1, 3))
    text = model.prefill(ids=IDS, max_new_tokens=2, ablate_head="1.3")
    assert [iv.label for iv in one.session.levers.interventions] == ["head 1.3 off"]
    assert np.array_equal(one.logits(0), text.logits(0))
    two = model.prefill(ids=IDS, max_new_tokens=2, ablate_head=[(1, 3), (0, -4)])
    assert [iv.label for iv in two.session.levers.interventions] == ["head 1.3 off", "head 0.0 off"]
    mean = model.prefill(ids=IDS, max_new_tokens=2, ablate_head=(1, 3), ablate="mean")
    z = model.prefill(ids=IDS, max_new_tokens=1).cache("blocks.1.attn.hook_z", step=0)["blocks.1.attn.hook_z"]
    d = model.config.head_dim
    fixed = torch.from_numpy(z[:, 3 * d:4 * d].mean(axis=0))

    def put_mean(v, hook):
        v = v.clone()
        v[..., 3 * d:4 * d] = fixed
        return v

    hooked = model.prefill(ids=IDS, max_new_tokens=2, hooks={"blocks.1.attn.hook_z": put_mean})
    assert np.abs(mean.logits(0) - hooked.logits(0)).max() < 1e-5
    assert not np.allclose(mean.logits(0), one.logits(0))
    with pytest.raises(inspector.InputError, match="mean"):
        model.prefill(ids=IDS, ablate="mean")
    with pytest.raises(inspector.InputError, match="ablate must be one of zero, mean"):
        model.prefill(ids=IDS, ablate_head=(1, 3), ablate="half")


# ---- trace files keep the levers
def test_save_keeps_the_levers_and_the_reopened_run_steps_the_same(model, tmp_path):
    run = model.prefill(ids=IDS, max_new_tokens=8, ablate_head=[(1, 3)], ablate="mean", scale_head=(0, 1, 0.5))
    run.step(2)
    path = tmp_path / "ablated.safetensors"
    run.save(path)
    again = inspector.open_trace(path, model)
    assert again.levers == run.levers and again.levers.ablate == "mean"
    assert [iv.label for iv in again.session.levers.interventions] == [iv.label for iv in run.session.levers.interventions]
    run.step(3), again.step(3)
    assert again.generated_ids == run.generated_ids and np.abs(again.logits(-1) - run.logits(-1)).max() < 1e-6


def test_a_run_with_hooks_saves_its_points_and_reopens_read_only(model, tmp_path):
    run = model.prefill(ids=IDS, max_new_tokens=4, hooks={"blocks.0.hook_resid_post": lambda v, h: None})
    path = tmp_path / "hooked.safetensors"
    with pytest.warns(UserWarning, match="not their functions"):
        run.save(path)
    again = inspector.open_trace(path, model)
    assert again.levers.hooks == ("blocks.0.hook_resid_post",) and np.array_equal(again.logits(0), run.logits(0))
    with pytest.raises(inspector.InputError) as exc:
        again.step()
    assert "hooks at blocks.0.hook_resid_post" in one_line(exc)


# ---- a model whose embedding has more rows than its tokenizer has pieces
def test_an_id_without_a_piece_shows_as_a_placeholder(tmp_path, capsys):
    directory = make_tiny_checkpoint(tmp_path / "padded", vocab_size=400)  # the tokenizer has 320 pieces
    model = inspector.load(directory)
    run = model.prefill("The quick", max_new_tokens=3, logit_bias={390: 100.0})
    run.step(2)
    assert run.generated_ids == [390, 390, 390] and run.pieces[-1] == "<no piece #390>"
    assert run.text == "" and model.decode([390]) == ""
    assert main(["run", "--prompt", "The quick", "--model", str(directory), "--max-new-tokens", "2",
                 "--logit-bias", "390=100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["generated_ids"] == [390, 390] and out["steps"][0]["chosen_piece"] == "<no piece #390>"
    path = tmp_path / "padded.safetensors"
    run.save(path)
    assert inspector.open_trace(path).pieces[-1] == "<no piece #390>"  # read-only: from the file's pieces
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run.figure("sampling").data


def test_the_cli_saves_interventions_and_the_page_reopens_them(model, tiny_llama_dir, tmp_path):  # noqa: F811
    from inspector.session.trace_file import load_trace

    path = tmp_path / "cli.safetensors"
    assert main(["run", "--prompt", "The quick brown fox", "--model", str(tiny_llama_dir), "--max-new-tokens", "3",
                 "--ablate-head", "1.0", "--ablate-mlp", "0", "--save-trace", str(path)]) == 0
    session = load_trace(path, model.loaded)  # what the page's Open trace and `inspector trace` read
    assert [iv.label for iv in session.levers.interventions] == ["head 1.0 off", "MLP 0 off"]
    assert load_trace(path).lever_spec.ablate_head == ((1, 0),)  # read-only: the description, no levers run


@pytest.mark.parametrize("family, overrides", [
    ("gemma3_text", dict(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, pad_token_id=0,
                         layer_types=["sliding_attention", "full_attention"])),
    ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                       mlp_only_layers=[])),
])
def test_every_point_of_every_family_is_counted_before_capture(family, overrides, tmp_path):
    model = inspector.load(make_tiny_checkpoint(tmp_path / family, model_type=family, **overrides), dtype="bf16")
    run = model.prefill(ids=list(range(5, 25)), max_new_tokens=4)
    run.step(2)
    for step in (0, 2):
        cache = run.cache("*", step=step)
        assert list(cache) == model.hook_names()
        assert sum(a.nbytes for a in cache.values()) == run.cache_nbytes("*", step)
    assert np.allclose(run.lens(0)[-1], run.probs(0), atol=1e-3)  # the lens ends at the step's distribution


def test_a_step_runs_again_under_a_window_and_not_under_a_policy_with_state(model):
    run = model.prefill(ids=IDS, policy="window", budget=4, max_new_tokens=8)
    run.step(5)  # the window has evicted by now
    cache = run.cache(["blocks.1.hook_resid_post", "unembed.hook_logits"], step=5)
    assert np.allclose(np.linalg.norm(cache["blocks.1.hook_resid_post"], axis=-1), run.records[5].resid_post[1], rtol=1e-5)
    assert np.array_equal(cache["unembed.hook_logits"][-1], run.logits(5))
    h2o = model.prefill(ids=IDS, policy="h2o", budget=4, max_new_tokens=4)
    h2o.step()
    with pytest.raises(inspector.InputError) as exc:
        h2o.cache("hook_embed", step=1)
    assert "HeavyHitters keeps what it saw" in one_line(exc)
