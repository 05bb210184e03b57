"""Invariants of the traced forward on tiny random models: the golden trace-name list, emitted once per
forward in that order also for prompts longer than an attention block, the recorded pattern equals an
unblocked softmax computed here, the residual stream adds up, the summary recorder's norms, queries and
lens inputs equal the full tensors, attention from `attention_weights` + `cache.read` equals the model's
own pattern, and the session's attention views and logit lens agree with the model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tests.support.engine_fixtures import tiny_model
from tests.support.tiny import tiny_llama_dir, tiny_qwen_dir  # noqa: F401 (fixtures)

from inspector.engine import recording
from inspector.engine import steps as engine
from inspector.engine.scores import attention_weights
from inspector.engine.config import SamplingParams
from inspector.engine.model import ATTN_CHUNK
from inspector.engine.recording import FullRecorder, SummaryRecorder
from inspector.engine.trace import COSTLY_HOOKS, hook_names
from inspector.models.loader import load_model
from inspector.session.session import Session

GREEDY = SamplingParams()
PROMPT = "Hello world! Tokenizers split text into pieces, then ids. The quick brown fox"
LONG = 2 * ATTN_CHUNK + 50  # three attention blocks

GOLDEN_LAYER_0 = [
    "blocks.0.hook_resid_pre", "blocks.0.ln1.hook_normalized", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v", "blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k",
    "blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z",
    "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.0.ln2.hook_normalized",
    "blocks.0.mlp.hook_pre", "blocks.0.mlp.hook_post", "blocks.0.hook_mlp_out", "blocks.0.hook_resid_post",
]


class NameRecorder:
    """Notes every name it is given; wants everything, or nothing costly with `costly=False`."""

    def __init__(self, costly: bool = True) -> None:
        self.names: list[str] = []
        self.costly = costly

    def wants(self, name: str) -> bool:
        return self.costly or not name.endswith(COSTLY_HOOKS)

    def __call__(self, name: str, value: torch.Tensor) -> None:
        self.names.append(name)


@pytest.fixture(scope="module")
def model():
    return tiny_model(num_key_value_heads=2, max_position_embeddings=1024)


def ids(n: int, seed: int = 0, vocab: int = 300) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def full_forward(model, tokens: list[int], cache=None) -> FullRecorder:
    rec = FullRecorder()
    with torch.inference_mode():
        rec.values["logits"] = model(torch.tensor([tokens]), cache, rec)
    return rec


def test_golden_trace_names():
    names = hook_names(2)
    assert names[0] == "hook_embed" and names[-2:] == ["ln_final.hook_normalized", "unembed.hook_logits"]
    assert names[1:18] == GOLDEN_LAYER_0
    assert names[18:35] == [n.replace("blocks.0.", "blocks.1.") for n in GOLDEN_LAYER_0]
    assert len(names) == len(set(names)) == 2 * 17 + 3


@pytest.mark.parametrize("n", [3, ATTN_CHUNK + 1, LONG])
def test_model_emits_exactly_the_table_once_per_forward(model, n):
    rec = NameRecorder()
    engine.prefill(model, ids(n), engine.new_cache(model), rec)
    assert rec.names == hook_names(model.config.num_hidden_layers)
    # a decode step after the long prefill too
    cache = engine.new_cache(model)
    engine.prefill(model, ids(n), cache)
    rec = NameRecorder()
    engine.decode_step(model, 5, cache, rec)
    assert rec.names == hook_names(model.config.num_hidden_layers)


def test_costly_points_only_when_wanted(model):
    rec = NameRecorder(costly=False)
    engine.prefill(model, ids(LONG), engine.new_cache(model), rec)
    assert rec.names == [n for n in hook_names(model.config.num_hidden_layers) if not n.endswith(COSTLY_HOOKS)]
    summary = SummaryRecorder(model.config.num_hidden_layers)
    assert not any(summary.wants(n) for n in hook_names(model.config.num_hidden_layers) if n.endswith(COSTLY_HOOKS))


@pytest.mark.parametrize("cached", [0, 37])
def test_recorded_pattern_equals_unblocked_softmax(model, cached):
    """A forward of LONG queries (three blocks) after `cached` positions: the recorded scores and pattern
    cover every key, and equal one softmax over the whole causal score matrix computed here in fp64."""
    tokens = ids(cached + LONG, seed=1)
    cache = engine.new_cache(model)
    if cached:
        engine.prefill(model, tokens[:cached], cache)
    rec = full_forward(model, tokens[cached:], cache)
    cache.advance(LONG)
    cfg, S, T = model.config, cached + LONG, LONG
    key_pos, q_pos = torch.arange(S), torch.arange(cached, S)
    future = key_pos[None, :] > q_pos[:, None]  # (T, S)
    for layer in range(cfg.num_hidden_layers):
        q = rec.values[f"blocks.{layer}.attn.hook_rot_q"][0].double()  # (H, T, d)
        k = cache.read(layer)[0].double()  # (KV, S, d): cached keys + this forward's
        k = k.repeat_interleave(cfg.n_rep, dim=0)  # (H, S, d)
        scores = q @ k.transpose(1, 2) / math.sqrt(cfg.head_dim)  # (H, T, S)
        want = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        got_scores = rec.values[f"blocks.{layer}.attn.hook_attn_scores"][0]
        got = rec.values[f"blocks.{layer}.attn.hook_pattern"][0]
        assert got.shape == got_scores.shape == (cfg.num_attention_heads, T, S)
        assert torch.all(torch.isneginf(got_scores) == future) and torch.all(got[:, future] == 0)
        assert torch.allclose(got_scores[:, ~future].double(), scores[:, ~future], atol=1e-5)
        assert torch.allclose(got.double(), want, atol=1e-6)
        assert torch.allclose(got.sum(-1), torch.ones(()), atol=1e-5)


def test_residual_stream_adds_up(model):
    v, L = full_forward(model, ids(20)).values, model.config.num_hidden_layers
    total = v["blocks.0.hook_resid_pre"].clone()
    for i in range(L):
        total += v[f"blocks.{i}.hook_attn_out"] + v[f"blocks.{i}.hook_mlp_out"]
        assert torch.allclose(v[f"blocks.{i}.hook_resid_mid"],
                              v[f"blocks.{i}.hook_resid_pre"] + v[f"blocks.{i}.hook_attn_out"], atol=1e-6)
    assert torch.allclose(v[f"blocks.{L - 1}.hook_resid_post"], total, atol=1e-5)
    assert torch.equal(v["blocks.0.hook_resid_pre"], v["hook_embed"])


@pytest.mark.parametrize("n, keep", [(1, None), (5, None), (5, 2), (40, None), (40, 3)])
def test_summary_recorder_equals_full_tensors(model, n, keep):
    """Short forwards (reduced after the forward) and long ones (layer by layer) keep the same summaries."""
    L, tokens = model.config.num_hidden_layers, ids(n, seed=2)
    full = full_forward(model, tokens).values
    summary = SummaryRecorder(L, keep=keep)
    with torch.inference_mode():
        model(torch.tensor([tokens]), None, summary)
    kept = slice(-keep if keep else 0, None)
    norms = summary.norm_arrays()
    for point in recording.NORM_POINTS:
        want = torch.stack([full[f"blocks.{i}.hook_{point}"][0, kept].norm(dim=-1) for i in range(L)])  # (L, n)
        assert norms[point].shape == want.shape and np.allclose(norms[point], want.numpy(), rtol=1e-5, atol=1e-6)
    queries = torch.stack([full[f"blocks.{i}.attn.hook_rot_q"][0, :, kept] for i in range(L)])  # (L, H, n, d)
    assert torch.equal(summary.queries(), queries)
    lens = torch.stack([full[f"blocks.{i}.hook_resid_post"][0, -1] for i in range(L)])  # (L, D)
    assert torch.equal(summary.lens_inputs(), lens)


def test_summary_recorder_reads_its_row(model):
    L = model.config.num_hidden_layers
    rows = [ids(6, seed=3), ids(6, seed=4)]
    full = FullRecorder()
    summary = SummaryRecorder(L, row=1)
    with torch.inference_mode():
        model(torch.tensor(rows), None, full)
        model(torch.tensor(rows), None, summary)
    want = torch.stack([full.values[f"blocks.{i}.hook_resid_post"][1, -1] for i in range(L)])
    assert torch.equal(summary.lens_inputs(), want)


def test_summary_recorder_keeps_no_square_maps(model):
    rec = SummaryRecorder(model.config.num_hidden_layers)
    P = 50
    engine.prefill(model, ids(P), engine.new_cache(model), rec)
    cfg = model.config
    assert rec.queries().shape == (cfg.num_hidden_layers, cfg.num_attention_heads, P, cfg.head_dim)
    held = [t for t in vars(rec).values() if isinstance(t, torch.Tensor)]
    held += [t for v in vars(rec).values() if isinstance(v, list) for t in v if isinstance(t, torch.Tensor)]
    assert held and all(t.shape[-2:] != (P, P) for t in held)


def test_long_forwards_keep_half_queries(model, monkeypatch):
    monkeypatch.setattr(recording, "HALF_QUERIES_FROM", 30)
    rec = SummaryRecorder(model.config.num_hidden_layers)
    engine.prefill(model, ids(40), engine.new_cache(model), rec)
    assert rec.queries().dtype == torch.float16
    rec = SummaryRecorder(model.config.num_hidden_layers)
    engine.prefill(model, ids(20), engine.new_cache(model), rec)
    assert rec.queries().dtype == torch.float32


def test_attention_weights_and_cache_read_equal_the_model_pattern(model):
    """What a view computes from stored queries and `cache.read` keys is the model's own pattern."""
    cfg, P = model.config, 30
    tokens = ids(P + 3, seed=5)
    cache = engine.new_cache(model)
    prefill = full_forward(model, tokens[:P], cache)
    cache.advance(P)
    steps = []
    for t in tokens[P:]:
        steps.append(full_forward(model, [t], cache))
        cache.advance(1)
    for layer in range(cfg.num_hidden_layers):
        k, v = cache.read(layer)  # (KV, P + 3, d) each
        assert k.shape == v.shape == (cfg.num_key_value_heads, P + 3, cfg.head_dim)
        q = prefill.values[f"blocks.{layer}.attn.hook_rot_q"]  # (1, H, P, d)
        got = attention_weights(q, cache.read(layer, end=P)[0][None], 0, cfg.n_rep)
        assert got.dtype == torch.float32
        assert torch.equal(got, prefill.values[f"blocks.{layer}.attn.hook_pattern"])
        q = steps[2].values[f"blocks.{layer}.attn.hook_rot_q"]  # (1, H, 1, d) at position P + 2
        got = attention_weights(q, k[None], torch.tensor([[P + 2]]), cfg.n_rep)
        assert torch.equal(got, steps[2].values[f"blocks.{layer}.attn.hook_pattern"])
        # a query may also be asked about fewer keys than it saw: rows still sum to 1
        early = attention_weights(q, k[None, :, :P], P + 2, cfg.n_rep)
        assert torch.allclose(early.sum(-1), torch.ones(()), atol=1e-6)


def test_lens_inputs_unembed_to_the_logits(model):
    rec = SummaryRecorder(model.config.num_hidden_layers)
    logits = engine.prefill(model, ids(12), engine.new_cache(model), rec)
    with torch.inference_mode():
        last = model.unembed(rec.lens_inputs()[-1])
    assert torch.allclose(last, logits, atol=1e-5)


# ---- the session's views go through the same function (public Session API only)

@pytest.fixture(scope="module", params=["llama", "qwen2"])
def session(request, tiny_llama_dir, tiny_qwen_dir):  # noqa: F811
    loaded = load_model(tiny_llama_dir if request.param == "llama" else tiny_qwen_dir)
    s = Session(loaded)
    s.prefill(PROMPT, GREEDY, max_new_tokens=50)
    for _ in range(4):
        s.step(GREEDY)
    return s


def test_session_attention_views_equal_model_pattern(session):
    rec = FullRecorder()
    with torch.inference_mode():
        session.model(torch.tensor([session.prompt_ids + session.generated_ids[:4]]), None, rec)
    P, H = len(session.prompt_ids), session.config.num_attention_heads
    for layer in range(session.config.num_hidden_layers):
        full = rec.values[f"blocks.{layer}.attn.hook_pattern"][0]  # (H, S, S)
        for head in range(H):
            pat = session.attention_pattern(0, layer, head)  # prefill: (P, P)
            assert pat.shape == (P, P)
            assert np.allclose(pat, full[head, :P, :P].numpy(), atol=1e-5)
            row = session.attention_row(3, layer, head)  # decode step 3 sits at position P + 2
            assert row.shape == (P + 3,)
            assert np.allclose(row, full[head, P + 2, : P + 3].numpy(), atol=1e-5)
        over = session.attention_overview(0, query_index=5)
        assert over.shape == (session.config.num_hidden_layers, H, 6)
        assert np.allclose(over[layer], full[:, 5, :6].numpy(), atol=1e-5)


def test_session_logit_lens_ends_at_real_logits(session):
    for step in (0, 3):
        lens = session.logit_lens(step)
        assert len(lens) == session.config.num_hidden_layers and all(len(layer) == 5 for layer in lens)
        assert lens[-1][0].id == session.generated_ids[step]  # greedy: the logits' argmax


def test_attention_weights_by_hand():
    """GQA head mapping, causal zeros, int and per-row positions, against a softmax written out here."""
    g = torch.Generator().manual_seed(7)
    B, H, KV, T, S, d = 2, 6, 2, 3, 7, 8
    q, k = torch.randn(B, H, T, d, generator=g), torch.randn(B, KV, S, d, generator=g)
    pos = torch.tensor([[4, 5, 6], [0, 1, 2]])  # row 0 continues after 4 cached keys; row 1 starts at 0
    got = attention_weights(q, k, pos, n_rep=H // KV)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                p = int(pos[b, t])
                s = k[b, h // (H // KV), :p + 1] @ q[b, h, t] / math.sqrt(d)  # keys 0..p of head h's KV head
                assert torch.allclose(got[b, h, t, :p + 1], torch.softmax(s, -1), atol=1e-6)
                assert torch.all(got[b, h, t, p + 1:] == 0)
    assert torch.equal(attention_weights(q[:1], k[:1], 4, n_rep=3), got[:1])
