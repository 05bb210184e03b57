"""The views name what each family adds, measured on tiny random checkpoints of each family.

- Gemma's post-norms: the recorded norms before the post-norm equal the norms of `hook_attn_out_raw` /
  `hook_mlp_out_raw` of a full recording, and the position chart draws them; other families record none.
- Gemma 2's final soft-cap: the Sampling chain starts with it, from the logits before the cap (equal to the
  model's own `unembed.hook_logits_raw`), and its probabilities after the cap are the sampler's raw ones.
- Per-operation timing of a chosen step: every operation of every layer, bytes that match the config, the
  session untouched; bad step or runs numbers are one line.
- Commitment layer on the chips: equals `commitment_layer` of the step's lens; badges only generated chips.
- The device picker: only present devices; an absent or unknown one is one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inspector.analysis.findings import commitment_layer
from inspector.engine.config import SamplingParams
from inspector.engine.devices import available_devices
from inspector.engine.recording import FullRecorder
from inspector.errors import InputError
from inspector.models.loader import load_model
from inspector.serving.results import Peaks
from inspector.session.op_timing import time_step_ops
from inspector.session.session import Session
from inspector.viz import optiming as vo
from inspector.viz import residual as vr
from inspector.viz import stages as vst
from inspector.viz import tokens as vtok
from tests.support.tiny import make_tiny_checkpoint

PROMPT = "The quick brown fox jumps over the lazy dog. Hello world!"
SAMPLED = SamplingParams(temperature=0.9, top_k=8, seed=3)
FAMILIES = {
    "gemma2": dict(sliding_window=6, query_pre_attn_scalar=24, attn_logit_softcapping=3.0, final_logit_softcapping=4.0),
    "gemma3_text": dict(sliding_window=6, query_pre_attn_scalar=16, rope_local_base_freq=100.0,
                        layer_types=["sliding_attention", "full_attention"]),
    "llama": {},
}


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    out = {}
    for family, overrides in FAMILIES.items():
        directory = make_tiny_checkpoint(tmp_path_factory.mktemp(family), model_type=family, **overrides)
        s = Session(load_model(str(directory)))
        s.prefill(PROMPT, SAMPLED, max_new_tokens=12)
        for _ in range(3):
            s.step(SAMPLED)
        out[family] = s
    return out


def full_record(s: Session) -> FullRecorder:
    rec = FullRecorder()
    with torch.inference_mode():
        s.model(torch.tensor([s.prompt_ids + s.generated_ids[:3]]), None, rec)
    return rec


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_post_norm_norms_are_the_models_own(sessions, family):
    s = sessions[family]
    full, P = full_record(s), len(s.prompt_ids)
    for layer in range(s.config.num_hidden_layers):
        for point, field in (("hook_attn_out_raw", "attn_out_raw"), ("hook_mlp_out_raw", "mlp_out_raw"),
                             ("hook_attn_out", "attn_out")):
            want = torch.linalg.vector_norm(full.values[f"blocks.{layer}.{point}"][0], dim=-1).numpy()  # (T,)
            np.testing.assert_allclose(getattr(s.records[0], field)[layer], want[:P], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(getattr(s.records[2], field)[layer], want[P + 1:P + 2], rtol=1e-4, atol=1e-5)
    # the post-norm rescales: before and after differ, and the chart shows both
    assert not np.allclose(s.records[0].attn_out_raw, s.records[0].attn_out)
    names = [t.name for t in vr.position_chart(s.records, P + 1).data]
    assert any("before post_attention_layernorm" in n for n in names)
    assert any("before post_feedforward_layernorm" in n for n in names)


def test_a_family_without_post_norms_records_none(sessions):
    s = sessions["llama"]
    assert s.records[0].attn_out_raw is None and s.records[-1].mlp_out_raw is None
    assert not any("post_" in t.name for t in vr.position_chart(s.records, 0).data)
    assert s.records[-1].sample.softcap_stat is None
    assert vst.chain_waterfall(s.records[-1].sample).layout.xaxis.ticktext[0] == "raw"


def test_the_soft_cap_is_the_first_stage_of_the_chain(sessions):
    s = sessions["gemma2"]
    full, P = full_record(s), len(s.prompt_ids)
    before = full.values["unembed.hook_logits_raw"][0, P + 1]  # logits before the cap, step 2's position
    sample = s.records[2].sample
    assert sample.softcap == 4.0 and sample.softcap_stat.name == "soft-cap 4·tanh(x/4)"
    assert sample.softcap_stat.removed == 0 and sample.softcap_stat.moved > 0
    want_before = torch.softmax(before, -1)
    for c in sample.candidates:
        assert c.prob_precap == pytest.approx(float(want_before[c.id]), rel=1e-4, abs=1e-7)
        assert c.logit == pytest.approx(4.0 * float(torch.tanh(before[c.id] / 4.0)), abs=1e-4)  # the chain's logits
    # the cap flattens the top: the most likely token loses probability
    top = max(sample.candidates, key=lambda c: c.prob_precap)
    assert top.prob_raw < top.prob_precap
    fig = vst.chain_waterfall(sample)
    assert list(fig.layout.xaxis.ticktext[:3]) == ["before soft-cap", "soft-cap 4·tanh(x/4)", "temperature"]
    chosen = next(t for t in fig.data if t.line.width == 4)
    c = next(c for c in sample.candidates if c.id == sample.token_id)
    assert chosen.y[0] == pytest.approx(c.prob_precap) and chosen.y[1] == pytest.approx(c.prob_raw)
    assert 'data-stage="softcap"' in vst.chain_table_html(sample)
    assert s.preview_sample(SamplingParams()).softcap_stat is not None  # a preview keeps the model's stage


@pytest.mark.parametrize("step", [-1, 0])
def test_per_operation_timing_of_a_chosen_step(sessions, step):
    s = sessions["gemma3_text"]
    ids, cache_len = list(s.generated_ids), s.cache.length
    t = time_step_ops(s, step, repeats=2)
    cfg, L = s.config, s.config.num_hidden_layers
    rec = s.records[step]
    assert (t.step, t.kind, t.tokens, t.context) == (rec.step, rec.kind, rec.n_new, rec.start_pos)
    block_ops = {"qkv", "attention", "o (post-norm)", "gate/up", "down (post-norm)", "norms"}
    for layer in range(L):
        assert block_ops <= {r.op for r in t.rows if r.layer == layer}
    ops = {r.op: r for r in t.totals}
    assert {"LM head", "sampling", "final norm"} <= set(ops) and all(r.seconds > 0 for r in t.totals)
    assert ops["LM head"].bytes_read == (cfg.vocab_size * cfg.hidden_size + rec.n_new * cfg.hidden_size) * 4
    D, I = cfg.hidden_size, cfg.intermediate_size
    assert ops["gate/up"].bytes_read == L * (2 * D * I * 4 + rec.n_new * D * 4)
    assert s.generated_ids == ids and s.cache.length == cache_len  # the run itself is untouched
    peaks = Peaks(50.0, 10.0, "float32")
    html = vo.op_table_html(t, peaks)
    assert 'data-op="LM head"' in html and "measured read bandwidth 10.0 GB/s" in html
    assert "op-layers" in vo.op_layers_html(t)
    fig = vo.op_roofline(t, peaks)
    assert fig.data[0].name == "roof (measured)" and "LM head" in list(fig.data[1].text)


def test_per_operation_timing_refuses_bad_input_in_one_line(sessions):
    s = sessions["llama"]
    with pytest.raises(InputError, match=r"no step 99: this generation has steps 0\.\.3"):
        time_step_ops(s, 99)
    with pytest.raises(InputError, match=r"repeats must be 1\.\.20, got 0"):
        time_step_ops(s, -1, repeats=0)


def test_chips_carry_the_commitment_layer(sessions):
    s = sessions["gemma2"]
    for k in range(len(s.records)):
        s.logit_lens(k)
    decided = vtok.decided_layers(s.records)
    P = len(s.prompt_ids)
    assert sorted(decided) == [P + k for k in range(len(s.records))]
    for k, rec in enumerate(s.records):
        layer, top1 = decided[P + k]
        assert layer == commitment_layer([tops[0].id for tops in rec.logit_lens])
        assert top1 == (rec.logit_lens[-1][0].id == s.generated_ids[k])
    ids = s.prompt_ids + s.generated_ids
    html = vtok.token_chips_html(ids, s.token_pieces(), [False] * len(ids), P, None, decided)
    assert html.count('class="ii-decided') == len(s.generated_ids)
    layer, top1 = decided[P]
    if top1:
        assert f"decided at layer {layer}" in html


def test_the_device_picker_offers_present_devices_and_refuses_others(sessions):
    from inspector.ui.app_model import reload_on_device

    loaded = sessions["llama"].loaded
    assert available_devices()[0] == "cpu"
    assert reload_on_device(loaded, "cpu") is False  # already there: nothing reloaded
    with pytest.raises(InputError, match="device must be one of cpu, cuda, mps"):
        reload_on_device(loaded, "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match=r"device cuda is not present on this machine \(available: cpu"):
            reload_on_device(loaded, "cuda")


def test_a_gemma2_trace_file_keeps_the_new_fields(sessions, tmp_path):
    from inspector.session.trace_file import load_trace, save_trace

    s = sessions["gemma2"]
    path = tmp_path / "g2.safetensors"
    save_trace(s, path, prompt=PROMPT)
    back = load_trace(path, s.loaded)
    assert back.records[-1].sample.softcap_stat.name == s.records[-1].sample.softcap_stat.name
    assert vst.chain_table_html(back.records[-1].sample) == vst.chain_table_html(s.records[-1].sample)
    for a, b in zip(back.records, s.records):
        np.testing.assert_array_equal(a.attn_out_raw, b.attn_out_raw)
        np.testing.assert_array_equal(a.mlp_out_raw, b.mlp_out_raw)


def test_the_device_switch_resets_every_session_and_refuses_while_one_runs(sessions, monkeypatch):
    """The Models tab's Load: one line for an absent device or a busy session; a real switch (the reload
    stubbed: this machine may have no second device) gives every session a fresh one on the new weights."""
    import html

    from inspector.engine.config import SamplingParams as SP
    from inspector.ui.labs import models as models_tab
    from tests.support.lab_context import make_ctx

    loaded = sessions["llama"].loaded
    ctx = make_ctx(loaded)
    sid, entry = ctx.store.get_or_create(None)
    entry.session.prefill(PROMPT, SP(), max_new_tokens=4)
    say = lambda device: html.unescape(ctx.panels["models"].device.switch_device(None, device)["status"])  # noqa: E731
    assert "device must be one of cpu, cuda, mps" in say("tpu")
    assert "the model is already on cpu" in say("cpu")
    with entry.exclusive("step"):
        assert "a session is running a model call" in say("cpu")
    old = entry.session
    monkeypatch.setattr(models_tab, "reload_on_device", lambda loaded, device: True)  # as if moved
    assert "every session starts afresh" in say("cuda")
    assert entry.session is not old and not entry.session.records and not entry.lock.locked()
