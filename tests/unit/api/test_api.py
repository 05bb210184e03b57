"""The Python API's contract (`import inspector`) on a tiny model: light import, runs, accessors against the
session's own records, figures equal to the page's builders on the same records, trace files round trip,
levers equal to the CLI's, and help() that names every public method."""

from __future__ import annotations

import inspect
import json
import pydoc
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

import inspector
from inspector.commands.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


@pytest.fixture(scope="module")
def run(model):
    r = model.prefill("Hello world", chat=True, temperature=0.7, seed=3, max_new_tokens=6)
    r.step()
    r.step(2)
    return r


def test_import_is_light_and_exports_the_contract():
    code = ("import sys, inspector; names = sorted(inspector.__all__); "
            "print(' '.join(m for m in ('gradio', 'plotly', 'torch') if m in sys.modules)); "
            "inspector.load; inspector.open_trace; inspector.Run; "
            "print(' '.join(m for m in ('gradio', 'plotly') if m in sys.modules)); print(names)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after, names = out.stdout.splitlines()
    assert before == "" and after == ""  # neither gradio, plotly nor torch on import; no plotly for the names
    assert {"load", "open_trace", "InputError", "Model", "Run", "figure"} <= set(eval(names))
    assert inspector.InputError is __import__("inspector.errors").errors.InputError


def test_a_figure_imports_plotly_but_never_gradio(tiny_llama_dir):  # noqa: F811
    code = (f"import sys, inspector; r = inspector.load({str(tiny_llama_dir)!r}).prefill('hi', max_new_tokens=2); "
            "assert 'plotly' not in sys.modules; r.figure('timing'); "
            "print('plotly' in sys.modules, 'gradio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


def test_run_holds_the_session_generation(run):
    s = run.session
    assert run.prompt_ids == s.prompt_ids and run.prompt_ids[0] == 1  # chat template: <|im_start|>
    assert len(run.generated_ids) == 4 and run.num_forwards == 4 and run.finished is None
    assert run.text == s.text and run.pieces == s.token_pieces()
    assert [r.sample.token_id for r in run.records] == run.generated_ids
    assert [r.sample.params.seed for r in run.records] == [3] * 4
    records = list(run.play())
    assert run.finished == "max_tokens" and len(run.generated_ids) == 6 and len(records) == 2
    with pytest.raises(inspector.InputError, match="has finished"):
        run.step()


def test_seeded_sampling_repeats_and_equals_the_cli(model, tiny_llama_dir, capsys):  # noqa: F811
    a = model.prefill("Hello world", temperature=0.9, top_k=40, seed=11, max_new_tokens=7)
    list(a.play())
    assert main(["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--temperature", "0.9",
                 "--top-k", "40", "--seed", "11", "--max-new-tokens", "7", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert a.generated_ids == cli["generated_ids"] and a.text == cli["text"] and a.finished == cli["finished"]
    for k, step in enumerate(cli["steps"]):  # the same top logits, read from the API's fp32 logits
        top = [t["id"] for t in step["top"]]
        logits = a.logits(k)
        assert np.allclose(logits[top], [t["logit"] for t in step["top"]], atol=1e-5)
        assert np.allclose(a.residual_norms(k)[1:, -1], step["resid_norms"], rtol=1e-6)
        assert a.kv_bytes(k) == step["kv_bytes"]


def test_accessors_shapes_and_values(run):
    cfg = run.session.config
    n_prompt = len(run.prompt_ids)
    logits = run.logits(0)
    assert logits.dtype == np.float32 and logits.shape == (cfg.vocab_size,)
    assert np.array_equal(logits, run.session.trace.forwards[0].logits.numpy())
    assert int(logits.argmax()) == run.records[0].sample.candidates[0].id
    norms = run.residual_norms(0)
    assert norms.shape == (cfg.num_hidden_layers + 1, n_prompt)
    assert np.array_equal(norms[1:], run.records[0].resid_post) and np.array_equal(norms[0], run.records[0].resid_pre[0])
    assert run.residual_norms(-1).shape == (cfg.num_hidden_layers + 1, 1)
    att = run.attention(1, step=0)
    assert att.shape == (cfg.num_attention_heads, n_prompt, n_prompt) and att.dtype == np.float32
    assert np.allclose(att.sum(-1), 1.0, atol=1e-5) and np.all(np.triu(att, 1) == 0)  # causal
    assert np.array_equal(att[2], run.session.attention_pattern(0, 1, 2))
    step2 = run.attention(0, step=2)
    assert step2.shape == (cfg.num_attention_heads, 1, n_prompt + 2)
    assert np.allclose(step2[:, 0], run.session.attention_overview(2)[0], atol=1e-6)
    assert len(run.logit_lens(1)) == cfg.num_hidden_layers and len(run.kv_bytes(0)) == cfg.num_hidden_layers
    assert run.sample(1) is run.records[1].sample


def test_figures_are_the_page_builders_on_the_same_records(run):
    from inspector.viz import attention as va
    from inspector.viz import kvcache as vk
    from inspector.viz import residual as vr
    from inspector.viz import stages as vst
    from inspector.viz import timing as vt

    recs, pieces, n = run.records, run.pieces, len(run.prompt_ids)
    k = 1  # the views as the page drew them after forward 1
    newest = recs[k].start_pos
    expected = {
        "residual": vr.position_chart(recs[:k + 1], newest, pieces[newest]),
        "attention": va.row_bars(run.session.attention_row(k, 1, 3), pieces, n, newest, 1, 3, 1),
        "kv": vk.layer_bars(recs[k].kv),
        "kv_growth": vk.growth_chart(recs[:k + 1], run.model.inventory().bytes),
        "sampling": vst.chain_waterfall(recs[k].sample),
        "timing": vt.timing_chart(recs[:k + 1]),
    }
    for view, want in expected.items():
        got = run.figure(view, step=k, layer=1, head=3)
        assert got.to_plotly_json() == want.to_plotly_json(), view
    prefill = run.figure("attention", step=0, layer=1, head=2)
    want = va.pattern_heatmap(run.session.attention_pattern(0, 1, 2), pieces, 0, 1, 2, 1)
    assert prefill.to_plotly_json() == want.to_plotly_json()
    inv = run.figure("inventory")
    assert "model.layers.1.mlp.down_proj.weight" in inv and inv._repr_html_() == str(inv)
    for view in ("residual", "lens", "attention", "kv", "sampling", "tokens", "inventory"):
        assert run.html(view, step=k).startswith("<"), view


def test_save_and_open_trace_keep_every_accessor(run, model, tmp_path):
    path = tmp_path / "run.safetensors"
    assert run.save(path) == path.stat().st_size
    opened = inspector.open_trace(path)
    assert (opened.prompt_ids, opened.generated_ids, opened.text, opened.finished) == \
        (run.prompt_ids, run.generated_ids, run.text, run.finished)
    for k in range(run.num_forwards):
        assert np.array_equal(opened.logits(k), run.logits(k))
        assert np.array_equal(opened.residual_norms(k), run.residual_norms(k))
        assert np.array_equal(opened.attention(1, step=k), run.attention(1, step=k))
    assert opened.figure("sampling").to_plotly_json() == run.figure("sampling").to_plotly_json()
    with pytest.raises(inspector.InputError, match="read-only"):
        opened.step()
    with pytest.raises(inspector.InputError, match="read-only"):
        opened.figure("inventory")
    # with the recording model it steps on; a finished run says so
    again = inspector.open_trace(path, model)
    assert again.model is model
    with pytest.raises(inspector.InputError, match="has finished"):
        again.step()


def test_an_intervention_equals_the_cli_and_changes_the_run(model, tiny_llama_dir, capsys):  # noqa: F811
    plain = model.prefill("The quick brown fox", max_new_tokens=5)
    off = model.prefill("The quick brown fox", max_new_tokens=5, ablate_head=["1.0", "1.1"], ablate_mlp=1)
    list(plain.play()), list(off.play())
    assert main(["run", "--prompt", "The quick brown fox", "--model", str(tiny_llama_dir), "--max-new-tokens", "5",
                 "--ablate-head", "1.0", "--ablate-head", "1.1", "--ablate-mlp", "1", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert off.generated_ids == cli["generated_ids"]
    assert [iv.label for iv in off.session.levers.interventions] == cli["interventions"]
    assert not np.array_equal(off.logits(0), plain.logits(0))
    # a trace file keeps the levers: reopened with the model, the run has the same interventions
    path = Path(tempfile.mkdtemp()) / "off.safetensors"
    off.save(path)
    again = inspector.open_trace(path, model)
    assert [iv.label for iv in again.session.levers.interventions] == cli["interventions"]
    with pytest.raises(inspector.InputError, match="keeps no quantized"):
        model.prefill("The quick brown fox", max_new_tokens=2, quant="int8").save(path)


def test_decoding_processors_equal_the_cli(model, tiny_llama_dir, capsys):  # noqa: F811
    r = model.prefill("Hello world", max_new_tokens=6, repetition_penalty=1.5, logit_bias={5: 3.0},
                      no_repeat_ngram_size=2)
    list(r.play())
    assert main(["run", "--prompt", "Hello world", "--model", str(tiny_llama_dir), "--max-new-tokens", "6",
                 "--repetition-penalty", "1.5", "--logit-bias", "5=3.0", "--no-repeat-ngram-size", "2", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert r.generated_ids == cli["generated_ids"]
    assert [s.name for s in r.sample(0).stage_stats] == [s["name"] for s in cli["steps"][0]["stages"]]


def test_prefill_defaults_are_the_cli_flags_defaults():
    from inspector.api.model import RUN_FLAGS

    signature = inspect.signature(inspector.Model.prefill).parameters
    defaults = RUN_FLAGS.defaults()
    for name in ("chat", "system", "max_new_tokens", "temperature", "top_k", "top_p", "min_p", "seed"):
        assert signature[name].default == defaults[name], name
    doc = inspector.Model.prefill.__doc__
    for name in RUN_FLAGS.names:  # every lever the keywords take is documented
        assert name in doc, name


def test_help_reads_well(run):
    text = pydoc.render_doc(inspector, renderer=pydoc.plaintext)
    for name in ("load", "open_trace", "InputError", "Model", "Run", "figure"):
        assert name in text, name
    run_help = pydoc.render_doc(type(run), renderer=pydoc.plaintext)
    for name in ("step", "play", "prompt_ids", "generated_ids", "text", "finished", "logits", "residual_norms",
                 "attention", "figure", "save"):
        assert f"{name}" in run_help, name
    for cls in (inspector.Model, inspector.Run, inspector.SpeculativeRun):
        for name, member in vars(cls).items():
            if not name.startswith("_"):
                assert inspect.getdoc(member), f"{cls.__name__}.{name} has no docstring"
    hints = inspect.get_annotations(inspector.Run.attention, eval_str=False)
    assert set(hints) == {"layer", "step", "return"}
