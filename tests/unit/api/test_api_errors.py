"""Every bad argument to the Python API raises `inspector.InputError` with one line naming what was given and
what is allowed; nothing else leaks (no IndexError, KeyError, TypeError from inside)."""

from __future__ import annotations

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

import inspector


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


@pytest.fixture(scope="module")
def run(model):
    r = model.prefill("Hello world", max_new_tokens=3)
    r.step()
    return r  # 2 forwards: steps -2..1


def refused(call, *expected: str) -> str:
    with pytest.raises(inspector.InputError) as exc:
        call()
    message = str(exc.value)
    assert "\n" not in message and message, message
    for part in expected:
        assert part in message, (part, message)
    return message


@pytest.mark.parametrize("kwargs, expected", [
    ({"prompt": ""}, ["prompt is empty"]),
    ({"prompt": "   "}, ["prompt is empty"]),
    ({"prompt": 42}, ["prompt must be a string", "int"]),
    ({"prompt": "x", "temperature": -1}, ["temperature must be", "got -1"]),
    ({"prompt": "x", "top_p": "abc"}, ["top_p must be a number in (0, 1]", "'abc'"]),
    ({"prompt": "x", "max_new_tokens": 0}, ["max_new_tokens must be a whole number >= 1", "got 0"]),
    ({"prompt": "x", "seed": True}, ["seed must be", "True"]),
    ({"prompt": "x", "chat": "yes"}, ["chat must be True or False", "'yes'"]),
    ({"prompt": "x", "bogus": 1}, ["unknown keyword 'bogus'", "temperature", "ablate_head", "policy"]),
    ({"prompt": "x", "ablate_head": "9.0"}, ["layer", "0 to 1", "'9'"]),
    ({"prompt": "x", "ablate_head": "1.7"}, ["head", "0 to 3", "'7'"]),
    ({"prompt": "x", "on_context_full": "wrap"}, ["on_context_full must be one of stop, window", "'wrap'"]),
    ({"prompt": "x", "quant": "int3"}, ["int3"]),
    ({"prompt": "x", "speculative": "ngram", "no_cache": True}, ["speculative", "drop no_cache"]),
    ({"prompt": "x", "num_beams": 2}, ["Model.beam_search"]),
    ({"prompt": "x", "policy": "lru"}, ["policy must be one of", "'lru'"]),
    ({"prompt": "x", "policy": "h2o"}, ["needs a budget"]),
    ({"prompt": "x", "policy": "window", "budget": 0}, ["budget must be a whole number >= 1", "got 0"]),
    ({"prompt": "the fox " * 200}, ["context window is 256 tokens"]),
])
def test_prefill_refuses(model, kwargs, expected):
    refused(lambda: model.prefill(**kwargs), *expected)


@pytest.mark.parametrize("call, expected", [
    (lambda r: r.logits(2), ["step must be a whole number from -2 to 1", "got 2"]),
    (lambda r: r.logits(-3), ["step", "got -3"]),
    (lambda r: r.logits("last"), ["step", "'last'"]),
    (lambda r: r.residual_norms(1.5), ["step", "1.5"]),
    (lambda r: r.attention(2), ["layer must be a whole number from -2 to 1", "got 2"]),  # negative: from the end
    (lambda r: r.attention(0, step=5), ["step", "got 5"]),
    (lambda r: r.attention(None), ["layer is empty"]),
    (lambda r: r.figure("heads"), ["unknown view 'heads'", "residual, attention, kv"]),
    (lambda r: r.figure(3), ["unknown view 3"]),
    (lambda r: r.figure("attention", head=4), ["head must be a whole number from -4 to 3", "got 4"]),
    (lambda r: r.figure("residual", position=99), ["position must be", "got 99"]),
    (lambda r: r.html("chips"), ["unknown HTML view 'chips'", "tokens"]),
    (lambda r: r.step(0), ["n must be a whole number >= 1", "got 0"]),
    (lambda r: r.save("/nonexistent-dir/x.safetensors"), ["cannot write the trace", "nonexistent-dir"]),
])
def test_run_refuses(run, call, expected):
    refused(lambda: call(run), *expected)


@pytest.mark.parametrize("kwargs, expected", [
    ({"dtype": "fp16"}, ["dtype must be one of fp32, bf16", "'fp16'"]),
    ({"dtype": 32}, ["dtype", "32"]),
    ({"attention": "flash"}, ["attention must be one of standard, tiled", "'flash'"]),
    ({"source": "/nonexistent/model-dir"}, ["model source not found: /nonexistent/model-dir", "a directory"]),
    ({"source": "./missing.gguf"}, ["model source not found", "a .gguf file"]),
    ({"device": "tpu"}, ["tpu"]),
])
def test_load_refuses(kwargs, expected):
    refused(lambda: inspector.load(**kwargs), *expected)


def test_open_trace_refuses_missing_and_corrupted_files(run, tmp_path):
    refused(lambda: inspector.open_trace(tmp_path / "none.safetensors"), "no trace file at", "none.safetensors")
    refused(lambda: inspector.open_trace(3), "path must be a file path")
    path = tmp_path / "run.safetensors"
    run.save(path)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # a flipped byte in the tensors
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(data))
    refused(lambda: inspector.open_trace(bad), "flipped.safetensors is corrupted")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(bytes(data[:100]))
    refused(lambda: inspector.open_trace(cut), "cut.safetensors", "not a readable trace file")
    text = tmp_path / "notes.safetensors"
    text.write_text("hello")
    refused(lambda: inspector.open_trace(text), "notes.safetensors")


@pytest.mark.parametrize("call, expected", [
    (lambda m: m.attribute(""), ["prompt is empty"]),
    (lambda m: m.attribute("Hello", token="Hello world again"), ["token", "tokens"]),
    (lambda m: m.attribute("Hello", token=10**6), ["token #1000000", "0 to 319"]),
    (lambda m: m.patch("The fox", "The quick dog", "#5", "#6"), ["clean is", "corrupt", "same token length"]),
    (lambda m: m.patch("The fox", "The dog", "#5", "#6", point="resid_post"), ["point must be one of", "'resid_post'"]),
    (lambda m: m.loss(""), ["text is empty"]),
    (lambda m: m.loss("a"), ["the text is 1 token"]),
    (lambda m: m.kv_eval("some text here", policy="lru"), ["unknown policy 'lru'"]),
    (lambda m: m.kv_eval("some text here", policy="window", budget=-1), ["budget must be", "got -1"]),
    (lambda m: m.quant("Hello", quant="int9"), ["int9"]),
    (lambda m: m.beam_search("Hello", num_beams=2, temperature=0.5), ["num_beams runs greedy beam search", "temperature"]),
    (lambda m: m.tokenize(None), ["text must be a string"]),
    (lambda m: m.pieces([1, 10**6]), ["token ids are whole numbers from 0 to 319", "1000000"]),
])
def test_analyses_refuse(model, call, expected):
    refused(lambda: call(model), *expected)


def test_lab_figure_refuses_what_it_cannot_draw(model):
    refused(lambda: inspector.figure("a string"), "no figure for a str", "Attribution")
    refused(lambda: inspector.figure(model.loss("The quick brown fox")), "TokenLosses", "grad_norms=True")
