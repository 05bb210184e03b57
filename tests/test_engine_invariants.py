"""Invariants of the traced forward: the golden trace-name list, the residual stream adds up, attention
rows computed on demand equal the model's own pattern (sum to 1, causal), K/V use the KV-head count,
the summary norms match the full tensors, and the logit lens ends at the real logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import tiny_llama_dir, tiny_qwen_dir  # noqa: F401 (fixtures)

from inspector.engine import steps as engine
from inspector.engine.config import SamplingParams
from inspector.models.loader import load_model
from inspector.engine.recording import FullRecorder, SummaryRecorder
from inspector.session.session import Session
from inspector.engine.trace import hook_names

GREEDY = SamplingParams()
PROMPT = "Hello world! Tokenizers split text into pieces, then ids. The quick brown fox"

GOLDEN_LAYER_0 = [
    "blocks.0.hook_resid_pre", "blocks.0.ln1.hook_normalized", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v", "blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k",
    "blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z",
    "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.0.ln2.hook_normalized",
    "blocks.0.mlp.hook_pre", "blocks.0.mlp.hook_post", "blocks.0.hook_mlp_out", "blocks.0.hook_resid_post",
]


class NameRecorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, name: str, value: torch.Tensor) -> None:
        self.names.append(name)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def session(request, tiny_llama_dir, tiny_qwen_dir):  # noqa: F811
    loaded = load_model(tiny_llama_dir if request.param == "llama" else tiny_qwen_dir)
    s = Session(loaded)
    s.prefill(PROMPT, GREEDY, max_new_tokens=50)
    for _ in range(4):
        s.step(GREEDY)
    return s


def full_trace(s: Session, upto_step: int) -> tuple[FullRecorder, torch.Tensor]:
    """Every trace point of one uncached forward over the sequence fed up to and including `upto_step`."""
    rec = FullRecorder()
    ids = s.prompt_ids + s.generated_ids[:upto_step]
    with torch.inference_mode():
        logits = s.model(torch.tensor([ids]), None, rec)
    return rec, logits[0]


def test_golden_trace_names():
    names = hook_names(2)
    assert names[0] == "hook_embed" and names[-2:] == ["ln_final.hook_normalized", "unembed.hook_logits"]
    assert names[1:18] == GOLDEN_LAYER_0
    assert names[18:35] == [n.replace("blocks.0.", "blocks.1.") for n in GOLDEN_LAYER_0]
    assert len(names) == len(set(names)) == 2 * 17 + 3


def test_model_emits_exactly_the_table(session):
    rec = NameRecorder()
    engine.prefill(session.model, [5, 6, 7], engine.new_cache(session.model), rec)
    assert rec.names == hook_names(session.config.num_hidden_layers)


def test_residual_stream_adds_up(session):
    rec, _ = full_trace(session, 3)
    v, L = rec.values, session.config.num_hidden_layers
    total = v["blocks.0.hook_resid_pre"].clone()
    for i in range(L):
        total += v[f"blocks.{i}.hook_attn_out"] + v[f"blocks.{i}.hook_mlp_out"]
        assert torch.allclose(v[f"blocks.{i}.hook_resid_mid"],
                              v[f"blocks.{i}.hook_resid_pre"] + v[f"blocks.{i}.hook_attn_out"], atol=1e-6)
    assert torch.allclose(v[f"blocks.{L - 1}.hook_resid_post"], total, atol=1e-5)
    assert torch.equal(v["blocks.0.hook_resid_pre"], v["hook_embed"])


def test_summary_norms_match_full_tensors(session):
    rec, _ = full_trace(session, 0)
    pre = session.records[0]
    for point in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
        full = torch.stack([rec.values[f"blocks.{i}.hook_{point}"][0].norm(dim=-1)
                            for i in range(session.config.num_hidden_layers)]).numpy()  # (L, P)
        assert np.allclose(getattr(pre, point), full, rtol=1e-5, atol=1e-5)
    # a decode step's norms are those of its one position in a full forward
    rec, _ = full_trace(session, 2)
    got = session.records[2].resid_post[:, 0]
    want = [float(rec.values[f"blocks.{i}.hook_resid_post"][0, -1].norm()) for i in range(session.config.num_hidden_layers)]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_attention_on_demand_equals_model_pattern(session):
    rec, _ = full_trace(session, 4)  # covers prompt + the 4 fed tokens
    P, H = len(session.prompt_ids), session.config.num_attention_heads
    for layer in range(session.config.num_hidden_layers):
        full = rec.values[f"blocks.{layer}.attn.hook_pattern"][0]  # (H, S, S)
        for head in range(H):
            pat = session.attention_pattern(0, layer, head)  # prefill: (P, P)
            assert pat.shape == (P, P)
            assert np.allclose(pat, full[head, :P, :P].numpy(), atol=1e-5)
            assert np.allclose(pat.sum(-1), 1, atol=1e-5) and np.all(np.triu(pat, 1) == 0)
            row = session.attention_row(3, layer, head)  # decode step 3 sits at position P + 2
            assert row.shape == (P + 3,)
            assert np.allclose(row, full[head, P + 2, : P + 3].numpy(), atol=1e-5)
        over = session.attention_overview(0, query_index=5)
        assert over.shape == (session.config.num_hidden_layers, H, 6)
        assert np.allclose(over[layer], full[:, 5, :6].numpy(), atol=1e-5)
    assert np.allclose(session.attention_row(0, 1, 1, query_index=0), [1.0])


def test_kv_cache_uses_kv_heads(session):
    cfg = session.config
    rec = session.records[-1]
    n = len(session.prompt_ids) + 4
    for kv in rec.kv:
        assert kv.k_shape == kv.v_shape == (1, cfg.num_key_value_heads, n, cfg.head_dim)
        assert kv.capacity >= kv.length == n
        groups = kv.kv_head_groups
        assert len(groups) == cfg.num_key_value_heads and sorted(sum(groups, [])) == list(range(cfg.num_attention_heads))
        assert groups[1] == list(range(cfg.n_rep, 2 * cfg.n_rep))
    assert session.cache.keys[0].shape[1] == cfg.num_key_value_heads < cfg.num_attention_heads


def test_logit_lens_ends_at_real_logits(session):
    L = session.config.num_hidden_layers
    for step in (0, 3):
        rec = session.records[step]
        logits = session._logits[step]
        assert len(rec.logit_lens) == L and all(len(layer) == 5 for layer in rec.logit_lens)
        last = rec.logit_lens[-1]
        top = torch.topk(logits, 5)
        assert [t.id for t in last] == top.indices.tolist()
        assert [t.prob for t in last] == pytest.approx(torch.softmax(logits, -1)[top.indices].tolist(), abs=1e-6)
    # a middle layer: final norm + LM head of that layer's last residual
    rec, _ = full_trace(session, 0)
    resid = rec.values["blocks.0.hook_resid_post"][0, -1]
    with torch.inference_mode():
        want = torch.softmax(session.model.unembed(resid), -1)
    lens0 = session.records[0].logit_lens[0]
    assert [t.id for t in lens0] == torch.topk(want, 5).indices.tolist()
    assert lens0[0].prob == pytest.approx(float(want.max()), abs=1e-5)
    assert lens0[0].piece == session.tokenizer.piece(lens0[0].id)


def test_summary_recorder_keeps_no_square_maps(session):
    rec = SummaryRecorder(session.config.num_hidden_layers)
    engine.prefill(session.model, session.prompt_ids, engine.new_cache(session.model), rec)
    P, cfg = len(session.prompt_ids), session.config
    assert rec.queries().shape == (cfg.num_hidden_layers, cfg.num_attention_heads, P, cfg.head_dim)
    held = [t for t in vars(rec).values() if isinstance(t, torch.Tensor)]
    assert all(P not in t.shape[-2:] or t.shape[-1] != P for t in held)


def test_lens_on_demand_equals_eager(session):
    lazy = Session(session.loaded, lens=False)
    lazy.prefill_ids(session.prompt_ids, GREEDY, max_new_tokens=50)
    lazy.step(GREEDY)
    assert lazy.records[1].logit_lens == []
    assert lazy.generated_ids == session.generated_ids[:2]
    for step in (0, 1):
        got = lazy.logit_lens(step)
        assert [[t.id for t in layer] for layer in got] == [[t.id for t in layer] for layer in session.records[step].logit_lens]
        assert lazy.records[step].logit_lens is got


def test_long_forwards_keep_half_queries(session, monkeypatch):
    from inspector.engine import recording

    monkeypatch.setattr(recording, "HALF_QUERIES_FROM", 8)
    s = Session(session.loaded)
    s.prefill_ids(session.prompt_ids, GREEDY, max_new_tokens=5)
    s.step(GREEDY)
    assert s._queries[0].dtype == torch.float16 and s._queries[1].dtype == torch.float32
    assert s.generated_ids == session.generated_ids[:2]
    for layer in range(s.config.num_hidden_layers):
        pat = s.attention_pattern(0, layer, 1)
        assert np.allclose(pat, session.attention_pattern(0, layer, 1), atol=2e-3)
        assert np.allclose(pat.sum(-1), 1, atol=1e-5)
