"""Trace files: a run saved and reopened equals the original in every record field and every on-demand
view; it steps on like the original with the recording model, is read-only without it; bad files give one
InputError line; nothing is ever pickled."""

from __future__ import annotations

import ast
import json
import pickle
import struct
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from inspector.engine.config import SamplingParams
from inspector.engine.recording import HALF_QUERIES_FROM
from inspector.errors import InputError
from inspector.models.loader import load_model
from inspector.session import restore, trace_file
from inspector.session.records import ForwardRecord
from inspector.session.session import Session
from inspector.session.trace_file import FORMAT_VERSION, load_trace, save_trace, weights_fingerprint
from tests.support.engine_fixtures import tiny_model
from tests.support.tiny import make_tiny_checkpoint
from tests.support.viz_records import tiny_loaded  # noqa: F401

SAMPLED = SamplingParams(temperature=0.8, top_k=5, seed=1)
TIMING_EXTRA = ("record_ms",)  # wall-clock numbers that differ between two runs of the same steps


def generate(loaded, steps: int, params: SamplingParams = SAMPLED, prompt: str = "The quick brown fox jumps",
             **session_kw) -> Session:
    s = Session(loaded, **{"lens": True, **session_kw})  # every step's lens kept, saved and compared
    s.prefill(prompt, params, max_new_tokens=40)
    for _ in range(steps):
        s.step(params)
    return s


def assert_records_equal(a: list[ForwardRecord], b: list[ForwardRecord], timings: bool = True) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for f in fields(ForwardRecord):
            x, y = getattr(ra, f.name), getattr(rb, f.name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and np.array_equal(x, y), f"step {ra.step}: {f.name}"
            elif f.name in ("forward_ms", "sample_ms", "tokenize_ms") and not timings:
                continue
            elif f.name == "extra" and not timings:
                assert {k: v for k, v in x.items() if k not in TIMING_EXTRA} == \
                       {k: v for k, v in y.items() if k not in TIMING_EXTRA}
            else:
                assert x == y, f"step {ra.step}: {f.name}"


def assert_views_equal(a: Session, b: Session, every_head: bool = True) -> None:
    """Every record field, every kept tensor, the cache and the on-demand views of every step: attention of
    every layer and head (`every_head=False`: the overview, which has every layer and head of one query
    position, at the first and last query, and patterns and rows of the first, middle and last layer and head)."""
    assert_records_equal(a.records, b.records)
    assert (a.prompt_ids, a.generated_ids, a.text, a.finished) == (b.prompt_ids, b.generated_ids, b.text, b.finished)
    assert a.token_pieces() == b.token_pieces() and a.ttft_ms == b.ttft_ms and a.tpot_ms == b.tpot_ms
    cfg = a.config
    for layer in range(cfg.num_hidden_layers):
        ka, va = a.cache.read(layer)
        kb, vb = b.cache.read(layer)
        assert torch.equal(ka, kb) and torch.equal(va, vb)
    other = SamplingParams(temperature=1.3, top_p=0.8, min_p=0.01, seed=7)
    for fa, fb in zip(a.trace.forwards, b.trace.forwards):
        assert torch.equal(fa.logits, fb.logits)
        for name in ("queries", "lens_inputs"):
            ta, tb = getattr(fa, name), getattr(fb, name)
            assert (ta is None and tb is None) or (ta.dtype == tb.dtype and torch.equal(ta, tb)), name
        step = fa.record.step
        if fa.queries is None:
            continue
        assert a.logit_lens(step) == b.logit_lens(step)
        L, H = cfg.num_hidden_layers, cfg.num_attention_heads
        layers, heads = (range(L), range(H)) if every_head else ({0, L // 2, L - 1}, {0, H // 2, H - 1})
        for q in range(fa.record.n_new) if every_head else {0, fa.record.n_new - 1}:
            assert np.array_equal(a.attention_overview(step, q), b.attention_overview(step, q))
        for layer in layers:
            for head in heads:
                assert np.array_equal(a.attention_pattern(step, layer, head), b.attention_pattern(step, layer, head))
                assert np.array_equal(a.attention_row(step, layer, head), b.attention_row(step, layer, head))
        pa, pb = a.preview_sample(other, step), b.preview_sample(other, step)
        assert pa == pb


@pytest.mark.parametrize("lens", [True, False])
def test_round_trip_on_the_tiny_model(tiny_loaded, tmp_path, lens):  # noqa: F811
    s = generate(tiny_loaded, 4, lens=lens)
    s.branch(2, s.records[2].sample.candidates[3].id)  # a forced token and a truncated cache travel too
    s.step(SAMPLED)
    path = tmp_path / "run.safetensors"
    save_trace(s, path, prompt="The quick brown fox jumps", chat=False)
    for loaded in (tiny_loaded, None):
        back = load_trace(path, loaded)
        assert_views_equal(s, back)
        assert back.records[2].extra["forced"] is True
    assert back.settings["prompt"] == "The quick brown fox jumps" and back.settings["params"]["top_k"] == 5


def test_round_trip_of_bf16_and_of_fp16_queries(tiny_loaded, tmp_path):  # noqa: F811
    bf16 = load_model(tiny_loaded.weights_path, dtype=torch.bfloat16)  # bf16 queries, cache and lens inputs
    long_dir = make_tiny_checkpoint(tmp_path / "long-tiny", max_position_embeddings=1024)
    long = Session(load_model(str(long_dir)))
    long.prefill_ids([(7 * i) % 300 + 3 for i in range(HALF_QUERIES_FROM + 8)], SAMPLED, max_new_tokens=4)
    long.step(SAMPLED)
    assert long.trace.forwards[0].queries.dtype == torch.float16  # a long prefill keeps fp16 queries
    for s in (generate(bf16, 2), long):
        save_trace(s, tmp_path / "t.safetensors")
        for loaded in (s.loaded, None):
            back = load_trace(tmp_path / "t.safetensors", loaded)
            assert_views_equal(s, back, every_head=False)
            assert back.cache.dtype == s.cache.dtype
    back = load_trace(tmp_path / "t.safetensors", long.loaded)
    long.step(SAMPLED)
    back.step(SAMPLED)
    assert back.generated_ids == long.generated_ids


def test_a_restored_session_steps_on_like_the_original(tiny_loaded, tmp_path):  # noqa: F811
    s = generate(tiny_loaded, 2)
    s.forward_ahead(lens=True)  # a forward run ahead is not saved: the restored session runs it itself
    save_trace(s, tmp_path / "t.safetensors")
    back = load_trace(tmp_path / "t.safetensors", tiny_loaded)
    assert back.read_only is None and not back.is_ahead
    for _ in range(5):
        s.step(SAMPLED)
        back.step(SAMPLED)
    assert_records_equal(s.records, back.records, timings=False)
    assert (s.generated_ids, s.text) == (back.generated_ids, back.text)
    for fa, fb in zip(s.trace.forwards, back.trace.forwards):
        assert torch.equal(fa.logits, fb.logits) and torch.equal(fa.queries, fb.queries)
    assert np.array_equal(s.attention_overview(-1), back.attention_overview(-1))
    back.resample(SamplingParams(temperature=1.0, seed=9))  # the other writing calls work too
    back.branch(1, 5)
    assert back.generated_ids[1] == 5 and len(back.records) == 2


def test_without_the_recording_model_it_is_read_only(tiny_loaded, tmp_path):  # noqa: F811
    s = generate(tiny_loaded, 2)
    save_trace(s, tmp_path / "t.safetensors")
    other = load_model(str(make_tiny_checkpoint(tmp_path / "other-tiny", seed=1)))  # same shape, other weights
    for loaded, names in ((None, [tiny_loaded.name, "no model"]), (other, [tiny_loaded.name, "other-tiny"])):
        back = load_trace(tmp_path / "t.safetensors", loaded)
        assert back.read_only and all(n in back.read_only for n in names), back.read_only
        assert_views_equal(s, back)  # the views need no model
        for call in (lambda: back.step(SAMPLED), lambda: back.resample(SAMPLED), lambda: back.branch(0, 3),
                     lambda: back.prefill("hi", SAMPLED), back.recompute_last_step):
            with pytest.raises(InputError) as err:
                call()
            assert str(err.value) == back.read_only and "\n" not in back.read_only
        assert back.forward_ahead() is False
        assert back.loaded.name == tiny_loaded.name  # the run's model, not the loaded one
        save_trace(back, tmp_path / "again.safetensors")  # a read-only trace saves again, unchanged
        assert_views_equal(s, load_trace(tmp_path / "again.safetensors"))


def test_the_fingerprint_changes_with_any_weight_and_costs_no_copy():
    model = tiny_model()
    before = weights_fingerprint(model)
    assert weights_fingerprint(model) == before and len(before) == 64
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[3, 7] += 1e-3  # one weight, not on the sampled stride
    assert weights_fingerprint(model) != before
    assert weights_fingerprint(model.to(torch.bfloat16)) != weights_fingerprint(tiny_model())


def test_a_run_without_recording_saves_and_reopens(tiny_loaded, tmp_path):  # noqa: F811
    s = generate(tiny_loaded, 2, record=False)
    save_trace(s, tmp_path / "t.safetensors")
    back = load_trace(tmp_path / "t.safetensors", tiny_loaded)
    assert_views_equal(s, back)
    with pytest.raises(InputError, match="not recorded"):
        back.attention_overview(0)
    back.step(SAMPLED)
    s.step(SAMPLED)
    assert back.generated_ids == s.generated_ids


def test_round_trip_on_the_real_model(default_model, tmp_path):
    s = Session(default_model, record=True)  # as `inspector run` builds it
    s.prefill("What is the capital of France?", SamplingParams(), chat=True, max_new_tokens=12)
    for _ in range(3):
        s.step(SamplingParams())
    path = tmp_path / "real.safetensors"
    save_trace(s, path, prompt="What is the capital of France?", chat=True)
    back = load_trace(path, default_model)
    assert back.read_only is None
    assert_views_equal(s, back, every_head=False)
    assert back.recorded_model["config"]["num_hidden_layers"] == 30
    for _ in range(2):
        s.step(SamplingParams())
        back.step(SamplingParams())
    assert (back.generated_ids, back.text) == (s.generated_ids, s.text)
    assert torch.equal(back.trace.forwards[-1].logits, s.trace.forwards[-1].logits)
    assert_records_equal(s.records, back.records, timings=False)


# ---- bad files: one InputError line each
@pytest.fixture(scope="module")
def saved(tiny_loaded, tmp_path_factory) -> Path:  # noqa: F811
    path = tmp_path_factory.mktemp("trace") / "good.safetensors"
    save_trace(generate(tiny_loaded, 1), path)
    return path


def _rewrite(src: Path, dst: Path, **metadata: str) -> Path:
    """The same tensors, with metadata keys replaced (or dropped when the value is None)."""
    with safe_open(str(src), "pt") as f:
        meta = dict(f.metadata())
    meta.update(metadata)
    save_file(load_file(str(src)), str(dst), metadata={k: v for k, v in meta.items() if v is not None})
    return dst


def _bad_files(saved: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    data = saved.read_bytes()
    header_len = struct.unpack("<Q", data[:8])[0]
    flipped = bytearray(data)
    flipped[8 + header_len + 100] ^= 0x40  # a bit of one tensor's bytes
    with safe_open(str(saved), "pt") as f:
        doc = json.loads(f.metadata()["trace"])
    doc["forwards"][0].pop("kv")
    crafted = json.dumps(doc)
    from inspector.session.trace_file import _digest  # a file whose checksum matches its broken document
    files = {
        "missing": (tmp / "nope.safetensors", "no trace file"),
        "text": (tmp / "notes.safetensors", "not a readable trace file"),
        "truncated": (tmp / "cut.safetensors", "not a readable trace file"),
        "corrupted": (tmp / "flipped.safetensors", "corrupted"),
        "foreign": (tmp / "weights.safetensors", "not an inspector trace"),
        "newer": (tmp / "v2.safetensors", f"reads up to version {FORMAT_VERSION}"),
        "bad version": (tmp / "vx.safetensors", "corrupted"),
        "missing field": (tmp / "crafted.safetensors", "corrupted: missing 'kv'"),
    }
    files["text"][0].write_text("just some notes, not tensors\n")
    files["truncated"][0].write_bytes(data[: len(data) * 2 // 3])
    files["corrupted"][0].write_bytes(bytes(flipped))
    save_file({"model.embed_tokens.weight": torch.zeros(4, 2)}, str(files["foreign"][0]), metadata={"format": "pt"})
    _rewrite(saved, files["newer"][0], version=str(FORMAT_VERSION + 1))
    _rewrite(saved, files["bad version"][0], version="one")
    _rewrite(saved, files["missing field"][0], trace=crafted,
             sha256=_digest(crafted, load_file(str(saved))))
    return files


@pytest.mark.parametrize("case", ["missing", "text", "truncated", "corrupted", "foreign", "newer", "bad version",
                                  "missing field"])
def test_bad_files_give_one_line(saved, tmp_path, case):
    path, message = _bad_files(saved, tmp_path)[case]
    with pytest.raises(InputError) as err:
        load_trace(path)
    text = str(err.value)
    assert message in text and "\n" not in text and path.name in text, text


def test_a_newer_version_names_both_versions(saved, tmp_path):
    path = _rewrite(saved, tmp_path / "v9.safetensors", version="9")
    with pytest.raises(InputError, match=f"format version 9; this inspector reads up to version {FORMAT_VERSION}"):
        load_trace(path)


def test_no_pickle_anywhere(saved, tiny_loaded, monkeypatch):  # noqa: F811
    for module in (trace_file, restore):
        source = Path(module.__file__).read_text()
        imported = {a.name for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for a in node.names} | {node.module for node in ast.walk(ast.parse(source))
                                            if isinstance(node, ast.ImportFrom)}
        assert not {"pickle", "dill", "joblib"} & imported and "torch.load" not in source and "torch.save" not in source
    with safe_open(str(saved), "pt") as f:  # a plain safetensors file: JSON header, raw tensor bytes
        assert f.metadata()["format"] == "inspector-trace"
    header_len = struct.unpack("<Q", saved.read_bytes()[:8])[0]
    assert json.loads(saved.read_bytes()[8:8 + header_len])["__metadata__"]["version"] == str(FORMAT_VERSION)

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "dump", "dumps", "Unpickler", "Pickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch, "save", refuse)
    back = load_trace(saved, tiny_loaded)
    save_trace(back, saved.with_name("again.safetensors"))


def test_saving_needs_a_run_and_a_writable_place(tiny_loaded, tmp_path):  # noqa: F811
    with pytest.raises(InputError, match="nothing to save"):
        save_trace(Session(tiny_loaded), tmp_path / "empty.safetensors")
    assert not list(tmp_path.iterdir())
    s = generate(tiny_loaded, 1)
    for where in (tmp_path / "no-such-folder" / "t.safetensors", tmp_path):  # a missing folder; a folder
        with pytest.raises(InputError, match="cannot write the trace to") as err:
            save_trace(s, where)
        assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())  # no partial file left behind


# ---- the document, field by field (inspector.session.codec)
FIXTURE = Path(__file__).parents[2] / "data" / "trace_v1_tiny.safetensors"  # written by the first version's code


ADDED_SINCE_V1 = {"stages", "stage_probs", "position_bytes", "stage_stats", "decoding", "branches", "attn_out_raw",
                  "mlp_out_raw", "prob_precap", "softcap", "softcap_stat",
                  "commitment", "routing", "levers", "request"}  # record fields a first-version file does not have


def without(value, keys: set[str]):
    """`value` (JSON) with the dict entries named `keys` removed at every depth."""
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


def test_a_file_of_the_first_version_still_loads():
    """tests/data/trace_v1_tiny.safetensors: the tiny model, prefill + 4 steps (one branched), logit lens on,
    saved by the hand-written writer the generic codec replaced; its document reads back field for field."""
    doc, tensors = trace_file.read_trace(FIXTURE)
    parsed = trace_file.parse_document(doc, tensors)
    # nothing dropped, renamed or retyped; fields added since then read as their defaults
    assert without(trace_file.to_json(parsed, {}), ADDED_SINCE_V1) == doc
    back = load_trace(FIXTURE)
    assert back.read_only and back.settings["prompt"] == "The quick brown fox"
    assert len(back.records) == len(back.generated_ids) == 4 and back.records[2].extra["forced"] is True
    assert back.records[0].kind == "prefill" and back.records[1].sample.params.top_k == 5
    assert back.logit_lens(3) and back.attention_overview(3).shape[0] > 0


def test_save_load_save_gives_the_same_file_contents(tiny_loaded, tmp_path):  # noqa: F811
    s = generate(tiny_loaded, 3, lens=True)
    save_trace(s, tmp_path / "a.safetensors", prompt="p", chat=True, system="sys")
    back = load_trace(tmp_path / "a.safetensors")
    assert_views_equal(s, back)
    save_trace(back, tmp_path / "b.safetensors", prompt="p", chat=True, system="sys")
    (doc_a, t_a), (doc_b, t_b) = trace_file.read_trace(tmp_path / "a.safetensors"), \
        trace_file.read_trace(tmp_path / "b.safetensors")
    assert doc_a == doc_b and sorted(t_a) == sorted(t_b)
    assert all(t_a[n].dtype == t_b[n].dtype and torch.equal(t_a[n], t_b[n]) for n in t_a)
    parsed = trace_file.parse_document(doc_a, t_a)
    assert parsed.settings.system == "sys" and parsed.forwards[1].sample.params == SAMPLED
    assert_records_equal(parsed.forwards, s.records)


def _corrupt(saved: Path, dst: Path, where: str, value, drop_tensor: str | None = None) -> Path:
    """`saved` with the document value at the dotted path `where` replaced (or a tensor dropped), its checksum
    made to match: only the field check can find it."""
    doc, tensors = trace_file.read_trace(saved)
    *parents, last = where.split(".")
    target = doc
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(last) if isinstance(target, list) else last] = value
    if drop_tensor:
        tensors.pop(drop_tensor)
    text = json.dumps(doc)
    with safe_open(str(saved), "pt") as f:
        meta = dict(f.metadata())
    save_file(tensors, str(dst), metadata={**meta, "trace": text, "sha256": trace_file._digest(text, tensors)})
    return dst


@pytest.mark.parametrize("where, value, message", [
    ("forwards.1.step", -5, "forwards.1.step must be a whole number >= 0, got -5"),
    ("forwards.0.start_pos", "nan", "forwards.0.start_pos must be a whole number >= 0, got 'nan'"),
    ("settings.max_new_tokens", "abc", "settings.max_new_tokens must be a whole number >= 0, got 'abc'"),
    ("settings.max_new_tokens", 1e309, "settings.max_new_tokens must be a whole number >= 0, got inf"),
    ("prompt_ids.0", -1, "prompt_ids.0 must be a whole number >= 0, got -1"),
    ("forwards.0.token_ids", "x", "forwards.0.token_ids must be a list, got 'x'"),
    ("forwards.1.sample.params.top_p", 5, "forwards.1.sample.params.top_p must be a number in (0, 1], got 5"),
    ("forwards.1.sample.params.seed", 1.5, "forwards.1.sample.params.seed must be a whole number >= 0, got 1.5"),
    ("forwards.0.sample.candidates.0.prob_raw", float("nan"),
     "candidates.0.prob_raw must be a number in [0, 1], got nan"),
    ("forwards.0.sample.entropy_raw", -0.5, "forwards.0.sample.entropy_raw must be a number >= 0, got -0.5"),
    ("forwards.0.kv.1.k_shape", [1, 2, 3], "forwards.0.kv.1.k_shape must hold 4 values, got 3"),
    ("forwards.0.logit_lens.0.0.logit", float("inf"), "forwards.0.logit_lens.0.0.logit must be a number, got inf"),
    ("timings.ttft_ms", -1, "timings.ttft_ms must be a number >= 0, got -1"),
    ("timings.tpot_ms.0", float("inf"), "timings.tpot_ms.0 must be a number >= 0, got inf"),
    ("settings.recompute", "yes", "settings.recompute must be true or false, got 'yes'"),
    ("settings.params.temperature", 1e-9, "sampling parameters: temperature must be 0 or a number >= 1e-06"),
    ("model.fingerprint", 7, "model.fingerprint must be text, got 7"),
    ("model.dtype", "float64", "model.dtype must be one of float32, bfloat16, float16, got 'float64'"),
    ("forwards.1.sample", [], "forwards.1.sample must be an object, got []"),
])
def test_a_bad_number_or_type_in_the_document_is_one_line(saved, tmp_path, where, value, message):
    path = _corrupt(saved, tmp_path / "bad.safetensors", where, value)
    with pytest.raises(InputError) as err:
        load_trace(path)
    text = str(err.value)
    assert text.startswith("bad.safetensors is corrupted: ") and message in text and "\n" not in text, text


def test_a_missing_record_array_is_named(saved, tmp_path):
    path = _corrupt(saved, tmp_path / "bad.safetensors", "text", "same", drop_tensor="forwards.1.resid_pre")
    with pytest.raises(InputError, match="corrupted: missing the array forwards.1.resid_pre$"):
        load_trace(path)
