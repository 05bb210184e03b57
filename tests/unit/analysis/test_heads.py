"""The head atlas on tiny random models: the four scores against transformers' eager attention on the same
probe ids (five families), scores of hand-made attention patterns stated by hand, the probe, the ablation
through the interventions lever against the same ablation by hooks in transformers, a run's ablation as a
normal branch, the CLI, the figures, and bad input as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.support.engine_fixtures import hf_pair, tiny_model
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.analysis import heads_ablation, heads
from inspector.analysis.head_findings import ROLES
from inspector.commands.cli import main
from inspector.engine.config import SamplingParams
from inspector.errors import InputError
from inspector.generation.levers import Intervention, Levers
from tests.support.families import FAMILIES
from tests.support.heads import scores_by_hand


FAMILY_CASES = ["llama", "qwen3", "mistral", "gemma2", "gemma3_text"]  # mistral, gemma: 8-position sliding window


def family_pair(case: str):
    return hf_pair(case, **FAMILIES.get(case, {}))


@pytest.mark.parametrize("case", FAMILY_CASES)
def test_scores_equal_transformers_eager_attention(case):
    """Every head's four scores, batched and one sequence per forward, against transformers' own attention
    maps on the same probe ids; n = 10 puts the duplicate and induction keys outside an 8-wide window."""
    hf, ours, cfg = family_pair(case)
    probe = heads.make_probe(cfg.vocab_size, n=10, count=3, seed=4, exclude=[0, 1, 2], prefix=[1])
    with torch.no_grad():
        att = hf(torch.as_tensor(probe.ids), output_attentions=True).attentions  # per layer (B, H, T, T)
    batched = heads.score_probe(ours, probe)
    one_by_one = heads.score_probe(ours, probe, max_rows=1)
    assert batched.batched_rows == 3 and one_by_one.batched_rows == 1
    for L in range(cfg.num_hidden_layers):
        want = scores_by_hand(att[L].double().numpy(), probe.n, 1)
        for r in ROLES:
            np.testing.assert_allclose(batched.scores[r][L], want[r], atol=2e-6, err_msg=f"{case} layer {L} {r}")
            np.testing.assert_allclose(one_by_one.scores[r][L], want[r], atol=2e-6)


@pytest.mark.parametrize("case", ["llama", "gemma3_text"])
def test_prompt_scores_and_a_head_pattern_equal_transformers(case):
    hf, ours, cfg = family_pair(case)
    ids = torch.randint(3, cfg.vocab_size, (17,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        att = hf(torch.tensor([ids]), output_attentions=True).attentions
    got = heads.prompt_scores(ours, ids)
    assert got.tokens == 17 and set(got.scores) == {"previous_token", "first_token"}
    for L in range(cfg.num_hidden_layers):
        want = scores_by_hand(att[L].double().numpy(), 1, 0)
        for r in ("previous_token", "first_token"):
            np.testing.assert_allclose(got.scores[r][L], want[r], atol=2e-6)
    hp = heads.head_pattern(ours, ids, 1, 2, [str(i) for i in ids], "a prompt")
    np.testing.assert_allclose(hp.pattern, att[1][0, 2].numpy(), atol=2e-6)


def synthetic(n: int, p: int, layer: int):
    """A pattern edit for `layer`: head (r + layer) % 4 does role r exactly (induction, previous token, first
    token, uniform over every key it can see)."""
    def fn(A: torch.Tensor) -> torch.Tensor:
        B, H, T, S = A.shape
        out = torch.zeros_like(A)
        for i in range(T):
            hs = [(r + layer) % 4 for r in range(4)]
            out[:, hs[0], i, i - n + 1 if i >= p + n else i] = 1  # induction in the repeat, itself elsewhere
            out[:, hs[1], i, max(i - 1, 0)] = 1
            out[:, hs[2], i, 0] = 1
            out[:, hs[3], i, :i + 1] = 1 / (i + 1)
        return out
    return Intervention(f"blocks.{layer}.attn.hook_pattern", fn, "synthetic")


def test_hand_made_patterns_give_the_scores_stated_by_hand():
    """n = 4 after one prefix token: T = 9, queries 1..8 for the first two scores, 5..8 in the repeat."""
    model = tiny_model()
    probe = heads.make_probe(300, n=4, count=2, seed=0, prefix=[7])
    levers = Levers(interventions=tuple(synthetic(4, 1, L) for L in range(3)))
    got = heads.score_probe(model, probe, levers).scores
    uniform_all = np.mean([1 / (i + 1) for i in range(1, 9)])
    uniform_repeat = np.mean([1 / (i + 1) for i in range(5, 9)])
    by_hand = {  # role -> scores of the heads doing: induction, previous token, first token, uniform
        "previous_token": [0, 1, 1 / 8, uniform_all],  # the sink head's query 1 reads 0 = its previous token
        "first_token": [0, 1 / 8, 1, uniform_all],  # the previous-token head's query 1 reads position 0
        "duplicate_token": [0, 0, 0, uniform_repeat],
        "induction": [1, 0, 0, uniform_repeat],
    }
    for L in range(3):
        for r in ROLES:
            want = np.zeros(4)
            for doing, value in enumerate(by_hand[r]):
                want[(doing + L) % 4] = value
            np.testing.assert_allclose(got[r][L], want, atol=1e-9, err_msg=f"layer {L} {r}")


def test_probe_draws_ordinary_tokens_repeated_once():
    p = heads.make_probe(50, n=30, count=4, seed=9, exclude=range(10), prefix=[3])
    assert p.ids.shape == (4, 61) and p.length == 61 and p.excluded == 10
    assert (p.ids[:, 0] == 3).all() and (p.ids[:, 1:31] == p.ids[:, 31:]).all()
    assert p.ids[:, 1:].min() >= 10 and p.ids.max() < 50
    assert (heads.make_probe(50, 30, 4, 9, range(10), [3]).ids == p.ids).all()
    assert not (heads.make_probe(50, 30, 4, 8, range(10), [3]).ids == p.ids).all()
    assert p.to_json() == {"n": 30, "sequences": 4, "seed": 9, "prefix_ids": [3], "length": 61, "vocab_size": 50,
                           "excluded_ids": 10}


def test_model_probe_excludes_special_tokens_and_starts_like_a_plain_prompt(tiny_llama_dir):  # noqa: F811
    from inspector.models.loader import load_model

    loaded = load_model(str(tiny_llama_dir))
    p = heads.model_probe(loaded, n=64, count=4, seed=1)
    tok = loaded.tokenizer
    assert p.prefix == ((tok.bos_id,) if tok.add_bos else ())
    assert p.excluded == len(tok.special_ids) and not set(p.ids[:, len(p.prefix):].ravel()) & tok.special_ids


def test_atlas_is_computed_once_per_model_and_probe():
    model = tiny_model(seed=1)
    probe = heads.make_probe(300, n=5, count=2, seed=0)
    assert heads.cached(model, probe) is None
    first = heads.atlas(model, probe)
    assert heads.cached(model, probe) is first and heads.atlas(model, probe) is first
    other = heads.atlas(model, heads.make_probe(300, n=5, count=2, seed=1))
    assert other is not first and heads.cached(model, probe) is first
    assert first.shape == (3, 4) and first.top("induction", 2)[0][2] == first.scores["induction"].max()


def hf_probe_losses(hf, probe, p: int, hooks=()):
    """Logits (B, T, V) and the two copies' mean losses from transformers, positions listed one by one."""
    with torch.no_grad():
        logits = hf(torch.as_tensor(probe.ids)).logits
    B, T = probe.ids.shape
    n = probe.n
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), torch.as_tensor(probe.ids[:, 1:]).reshape(-1),
                          reduction="none").view(B, T - 1)
    first = [float(nll[b, t - 1]) for b in range(B) for t in range(p + 1, p + n)]  # predicting position t
    repeat = [float(nll[b, t - 1]) for b in range(B) for t in range(p + n + 1, p + 2 * n)]
    return logits, np.mean(first), np.mean(repeat)


def zero_head_hook(head: int, d: int):
    def hook(module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0
        return (x,)
    return hook


@pytest.mark.parametrize("case", ["llama", "gemma3_text"])
def test_ablation_through_the_lever_equals_transformers_with_hooks(case):
    """Heads zeroed with `interventions.head(..., "zero")` against o_proj's input zeroed by forward pre-hooks."""
    from inspector.engine import steps
    from inspector.generation import loop

    hf, ours, cfg = family_pair(case)
    probe = heads.make_probe(cfg.vocab_size, n=8, count=3, seed=2, exclude=[0, 1, 2])
    chosen = [(1, 2), (2, 0), (0, 3)]
    levers = Levers(interventions=heads_ablation.head_ablations(cfg, chosen))
    handles = [hf.model.layers[L].self_attn.o_proj.register_forward_pre_hook(zero_head_hook(h, cfg.head_dim))
               for L, h in chosen]
    try:
        ref_logits, ref_first, ref_repeat = hf_probe_losses(hf, probe, 0)
    finally:
        for hd in handles:
            hd.remove()
    logits = loop.forward(ours, steps.new_cache(ours, 3), probe.ids.tolist(), levers, all_positions=True)
    assert float((logits - ref_logits).abs().max()) < 1e-4
    first, repeat = heads_ablation.probe_losses(ours, probe, levers)
    assert first == pytest.approx(ref_first, abs=1e-5) and repeat == pytest.approx(ref_repeat, abs=1e-5)
    plain = hf_probe_losses(hf, probe, 0)
    assert heads_ablation.probe_losses(ours, probe) == pytest.approx(plain[1:], abs=1e-5)
    assert (first, repeat) != pytest.approx(plain[1:], abs=1e-3)  # the ablation changed something


def test_ablation_rows_none_top_k_and_random_other_heads():
    model = tiny_model(seed=2)
    cfg = model.config
    probe = heads.make_probe(300, n=6, count=2, seed=0)
    atlas = heads.score_probe(model, probe)
    ab = heads_ablation.ablation(model, atlas, "previous-token", 3, seed=5)
    none, top, rand = ab.rows
    assert (none.label, top.label, rand.label) == ("none", "top 3 previous-token heads", "3 random heads")
    assert top.heads == [(L, h) for L, h, _ in atlas.top("previous_token", 3)]
    assert len(set(rand.heads)) == 3 and not set(rand.heads) & set(top.heads)
    assert heads_ablation.ablation(model, atlas, "previous_token", 3, seed=5).rows[2].heads == rand.heads
    assert (none.loss_first, none.loss_repeat) == pytest.approx(heads_ablation.probe_losses(model, probe))
    assert (top.loss_first, top.loss_repeat) == pytest.approx(
        heads_ablation.probe_losses(model, probe, Levers(interventions=heads_ablation.head_ablations(cfg, top.heads))))
    assert ab.to_json()["rows"][1]["heads"] == [list(h) for h in top.heads]


def test_ablation_in_a_run_is_a_normal_branch_of_it(tiny_llama_dir):  # noqa: F811
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    loaded = load_model(str(tiny_llama_dir))
    params = SamplingParams()
    s = Session(loaded)
    s.prefill("Hello world", params, max_new_tokens=12)
    for _ in range(5):
        s.step(params)
    before_ids, before_logits = list(s.generated_ids), s.trace.forwards[-1].logits.clone()
    record, levers = heads_ablation.ablate_in_run(s, [(1, 2), (0, 1)])
    assert record.label == "heads 1.2, 0.1 off" and record.heads == [(1, 2), (0, 1)]
    assert [iv.label for iv in s.own_levers.interventions] == ["head 1.2 off", "head 0.1 off"] and s.own_levers == levers
    fresh = Session(loaded, levers=levers)
    fresh.prefill("Hello world", params, max_new_tokens=12)
    while len(fresh.generated_ids) < len(before_ids) and not fresh.finished:
        fresh.step(params)
    assert s.generated_ids == fresh.generated_ids
    probs_before = torch.softmax(before_logits, -1)
    probs_after = torch.softmax(fresh.trace.forwards[-1].logits, -1)
    assert record.step_before == 5 and record.step_after == len(fresh.records) - 1
    assert record.token_prob_before == pytest.approx(float(probs_before[before_ids[5]]))
    assert record.token_prob_after == pytest.approx(float(probs_after[before_ids[5]]))
    assert record.top_before[0][1] == pytest.approx(float(probs_before.max()))
    assert record.top_after[0][1] == pytest.approx(float(probs_after.max()))
    diverge = next((i for i, (a, b) in enumerate(zip(before_ids, fresh.generated_ids)) if a != b), None)
    assert record.first_diverging == diverge
    assert record.top_before != record.top_after


def test_run_scores_and_pattern_read_the_tokens_the_run_fed(tiny_llama_dir):  # noqa: F811
    from inspector.models.loader import load_model
    from inspector.session.session import Session

    loaded = load_model(str(tiny_llama_dir))
    s = Session(loaded)
    s.prefill("Hello world, hello", SamplingParams(), max_new_tokens=8)
    s.step(SamplingParams())
    ids = heads.run_ids(s)
    assert ids == s.prompt_ids + s.generated_ids[:1]
    assert heads.run_scores(s).tokens == len(ids)
    hp = heads.run_pattern(s, 1, 3)
    step0 = s.attention_pattern(0, 1, 3)  # the prefill's queries, as the Attention view computes them
    np.testing.assert_allclose(hp.pattern[:len(s.prompt_ids), :len(s.prompt_ids)], step0, atol=1e-5)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_equals_the_library(capsys, tiny_llama_dir):  # noqa: F811
    from inspector.models.loader import load_model

    code, out, _ = cli(capsys, "heads", "--model", str(tiny_llama_dir), "--probe-len", "7", "--probes", "3",
                       "--seed", "2", "--role", "duplicate_token", "--top-k", "2", "--json")
    assert code == 0
    doc = json.loads(out)
    loaded = load_model(str(tiny_llama_dir))
    atlas = heads.atlas(loaded.model, heads.model_probe(loaded, 7, 3, 2))
    assert doc["heads"] == atlas.heads_json() and len(doc["heads"]) == 2 * 4
    assert set(doc["heads"][0]) == {"layer", "head", *ROLES}
    assert doc["probe"]["n"] == 7 and doc["probe"]["sequences"] == 3 and doc["probe"]["seed"] == 2
    assert [r["label"] for r in doc["ablation"]["rows"]] == ["none", "top 2 duplicate-token heads", "2 random heads"]
    assert doc["ablation"]["rows"][1]["heads"] == [[L, h] for L, h, _ in atlas.top("duplicate_token", 2)]
    code, text, _ = cli(capsys, "heads", "--model", str(tiny_llama_dir), "--probe-len", "7", "--probes", "3",
                        "--seed", "2", "--top-k", "2")
    assert code == 0 and text.count("\n") > 8 and "strongest induction" in text and "2 random heads off" in text


@pytest.mark.parametrize("args, code, says", [
    (["--probes", "0"], 2, "probes must be a whole number >= 1, got '0'"),
    (["--probe-len", "1"], 2, "probe-len must be a whole number >= 2"),
    (["--probe-len", "129"], 1, "the context window is 256: use a probe length of at most 128"),
    (["--top-k", "9"], 1, "top-k must be a whole number from 1 to 8"),
    (["--top-k", "5"], 1, "too few for a random set of 5: use a top-k of at most 4"),
    (["--role", "copying"], 2, "invalid choice: 'copying'"),
])
def test_cli_bad_input_is_one_line(capsys, tiny_llama_dir, args, code, says):  # noqa: F811
    got, out, err = cli(capsys, "heads", "--model", str(tiny_llama_dir), "--top-k", "2", *args)
    assert got == code and says in err and err.count("\n") == 1 and not out


def test_library_refusals_are_one_line():
    model = tiny_model()
    cfg = model.config
    for call, says in [(lambda: heads.make_probe(300, n=129, context=256), "probe length 129 repeated once is 258"),
                       (lambda: heads.make_probe(300, count=0), "probes must be a whole number >= 1"),
                       (lambda: heads.make_probe(3, exclude=[0, 1]), "1 ordinary tokens"),
                       (lambda: heads.check_role("copy"), "unknown head role 'copy'"),
                       (lambda: heads_ablation.check_k(cfg, 13), "from 1 to 12"),
                       (lambda: heads_ablation.check_k(cfg, 0), "from 1 to 12"),
                       (lambda: heads.prompt_scores(model, [5]), "at least 2 tokens"),
                       (lambda: heads.head_pattern(model, [5, 6], 3, 0, [], ""), "layer must be"),
                       (lambda: heads.head_pattern(model, [5, 6], 0, 4, [], ""), "head must be")]:
        with pytest.raises(InputError) as info:
            call()
        assert says in str(info.value) and "\n" not in str(info.value)
