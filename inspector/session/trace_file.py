"""Trace files: one generation saved as one `.safetensors` file, reopened without running the model.

`save_trace(session, path)` writes; `load_trace(path, loaded=None)` reads it back as a `RestoredSession`
(`inspector.session.restore`) whose views equal the original's, and which steps on when `loaded` is the
model that recorded it (same config and weights fingerprint), under the interventions it was saved with
(`session.lever_spec`); otherwise, or when the run had hooks (functions a file cannot keep), it is read-only.

Format `FORMAT`, version `FORMAT_VERSION`: safetensors tensors for the arrays, and the safetensors
header's `__metadata__` (string -> string) holding "format", "version", "trace" (one JSON document) and
"sha256" (of that document and every tensor's bytes: any flipped byte reads as corrupted). Never pickle.
- JSON: the model (name, source, dtype, HF config, `weights_fingerprint`), the settings (prompt, chat,
  system when the caller gives them; the newest step's sampling params; max new tokens; the session's
  recompute/record/lens flags, its decoding settings: penalties, bans, stop strings, constraint, and its
  interventions as a `LeverSpec` (a hook is kept by its trace point only), the run's `RunRequest` JSON
  when the caller gives it (`inspector run --save-trace`, `Run.save`); files written before those
  existed read as the defaults), prompt and generated ids, the display piece of every vocabulary id and
  the special ids (a reader without the tokenizer shows any token, sampling previews included), text,
  finish reason, EOS ids, timings, and per committed forward its `ForwardRecord` without the arrays
  (sample, KV stats, timings, logit lens); the run's branch tree when the caller gives one
  (`inspector.session.branches.SavedTree`: every branch's tokens and text; the forwards are the shown
  branch's, the others are replayed when switched to; files without it read as a single branch). Saving computes the logit lens of every recorded
  forward that has not shown it yet, kept in its record as showing it would, so a reader without the
  model shows it too.
- Tensors: per forward k `forwards.k.{resid_pre, attn_out, resid_mid, mlp_out, resid_post}` (norms),
  `forwards.k.logits_fp16` (the record's), `forwards.k.logits` (fp32, what sampling and previews use),
  `forwards.k.queries` and `forwards.k.lens_inputs` (when recorded), a mixture of experts'
  `forwards.k.routing.{expert_ids, expert_weights, router_probs}` (its `RoutingRecord`; files without them,
  dense models' and older ones, read with routing None); `cache.keys` and `cache.values`, the
  KV cache's committed positions (layers, kv_heads, positions, head_dim), which the attention views read.
A forward run ahead of the next step (`pending`) is not saved: it is not part of the generation yet.

The document is the dataclass `TraceDocument`, written and read by the generic `inspector.session.codec`
(record array fields travel as the tensors above, `TENSOR_NAMES` naming the one stored under another
name). Reading checks it field by field before the session is rebuilt: types, every number through
`inspector.validate` (ids, counts and positions whole numbers >= 0, probabilities in [0, 1], times and
entropies >= 0, sampling parameters in the engine's ranges, every number finite), record arrays present.

Reading a file that is missing, not safetensors, truncated, corrupted (a flipped byte, a value of the
wrong type or out of its range: named by its path, "forwards.2.step must be a whole number >= 0, got -5"),
foreign (a safetensors file that is no trace) or of a newer version raises one `InputError` line.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from inspector.engine.config import ModelConfig, SamplingParams
from inspector.generation.lever_spec import LeverSpec
from inspector.generation.settings import DecodingSettings
from inspector.errors import InputError, InspectorError, first_line
from inspector.session.branches import SavedTree, check_saved
from inspector.session.codec import from_json, to_json
from inspector.session.records import ForwardRecord
from inspector.session.restore import DTYPES, RestoredSession
from inspector.validate import Bound

FORMAT = "inspector-trace"
FORMAT_VERSION = 1
FINGERPRINT_SAMPLES = 1024  # evenly strided elements of each parameter hashed into the fingerprint
TENSOR_NAMES = {"logits": "logits_fp16"}  # record array fields stored under another tensor name
# Numbers of the document, by field name, whose range is not the default (whole numbers >= 0: ids, counts,
# positions, sizes; reals: any finite number, e.g. a logit).
UNIT = Bound("probability", False, 0, 1)
NON_NEGATIVE = Bound("a time or entropy", False, 0)
RANGES = {
    **dict.fromkeys(("prob", "prob_raw", "prob_temperature", "prob_final"), UNIT),
    **dict.fromkeys(("entropy_raw", "entropy_final", "forward_ms", "sample_ms", "tokenize_ms", "ttft_ms", "tpot_ms",
                     "temperature"), NON_NEGATIVE),
    "top_p": Bound("top_p", False, 0, 1, lo_open=True),
    "min_p": Bound("min_p", False, 0, 1, hi_open=True),
}


# ---- the JSON document, field by field (`inspector.session.codec` maps it to and from JSON)
@dataclass
class RecordedModel:
    name: str
    source: str
    dtype: str
    config: dict[str, Any]  # HF config.json keys (`ModelConfig.from_hf` checks them)
    fingerprint: str  # `weights_fingerprint` of the recording model


@dataclass
class Settings:
    prompt: str | None  # prompt, chat, system: as the caller of save_trace gave them (None: not given)
    chat: bool | None
    system: str | None
    params: SamplingParams | None  # the newest step's sampling parameters
    max_new_tokens: int
    recompute: bool
    record: bool
    lens: bool
    decoding: DecodingSettings = field(default_factory=DecodingSettings)  # penalties, bans, stop, constraint
    levers: LeverSpec = field(default_factory=LeverSpec)  # the run's interventions (files before them: none)
    request: dict[str, Any] | None = None  # the run's description, `RunRequest.to_json()` (None: not given)


@dataclass
class Timings:
    ttft_ms: float
    tpot_ms: list[float]


@dataclass
class TraceDocument:
    model: RecordedModel
    settings: Settings
    prompt_ids: list[int]
    generated_ids: list[int]
    pieces: list[str]  # the display piece of every vocabulary id
    specials: list[int]
    text: str
    finished: str | None
    eos_ids: list[int]
    timings: Timings
    forwards: list[ForwardRecord]  # their arrays are the tensors `forwards.k.<field>` (TENSOR_NAMES)
    branches: SavedTree | None = None  # the run's branches (None: one branch, the forwards')


def tensor_name(path: str) -> str:
    """The tensor holding the array at `path` in the document ("forwards.0.logits" -> "forwards.0.logits_fp16")."""
    head, _, field = path.rpartition(".")
    return f"{head}.{TENSOR_NAMES.get(field, field)}" if head else TENSOR_NAMES.get(field, field)


class RecordArrays(Mapping):
    """The record arrays of a file by document path, read as numpy from its tensors when asked for."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def __getitem__(self, path: str) -> np.ndarray:
        return self.tensors[tensor_name(path)].numpy()

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and tensor_name(path) in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over every parameter's and buffer's name, shape and dtype, FINGERPRINT_SAMPLES evenly strided
    elements and the float64 sum of all its elements: any single changed weight changes the sum. One read
    of the weights, no copy of them (0.2 s to 1.5 s for 135M parameters on this 2-core machine)."""
    h = hashlib.sha256()
    with torch.inference_mode():
        for name, p in [*model.named_parameters(), *model.named_buffers()]:  # buffers: e.g. packed quantized weights
            flat = p.detach().reshape(-1)
            n = flat.numel()
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
            h.update(flat[::max(1, n // FINGERPRINT_SAMPLES)].float().numpy().tobytes())
            h.update(flat.sum(dtype=torch.float64).numpy().tobytes())
    return h.hexdigest()


_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its weights_fingerprint
_fingerprints_lock = threading.Lock()


def model_fingerprint(model: torch.nn.Module) -> str:
    """`weights_fingerprint(model)`, computed once per model object: a loaded model's weights never change in
    place (a quantized or other model is another object)."""
    with _fingerprints_lock:
        known = _fingerprints.get(model)
    if known is None:
        known = weights_fingerprint(model)
        with _fingerprints_lock:
            _fingerprints[model] = known
    return known


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---- writing
def save_trace(session: Any, path: str | os.PathLike[str], *, prompt: str | None = None,
               chat: bool | None = None, system: str | None = None, branches: SavedTree | None = None,
               levers: LeverSpec | None = None, request: dict[str, Any] | None = None) -> int:
    """Write the session's committed forwards, KV cache and state to `path` (replaced atomically); the
    file's size in bytes. `prompt`, `chat`, `system` are saved as settings when given (the session keeps
    only the token ids), `branches` as the run's tree (its shown branch must be the session's tokens), and
    `levers` as the description of the interventions the session runs with (`LeverSpec`), `request` (default:
    the session's) as the run's whole description (`inspector.generation.request.RunRequest`'s JSON form).
    InputError when nothing was generated yet."""
    trace = session.trace
    if not trace.forwards:
        raise InputError("nothing to save: run prefill first")
    for f in trace.forwards:
        if f.lens_inputs is not None:
            trace.fill_lens(f)  # computed once and kept in the record, as the Residual view would
    if branches is not None:
        _check_tree(branches, session.generated_ids)
    arrays: dict[str, np.ndarray] = {}
    request = getattr(session, "request", None) if request is None else request
    doc = to_json(_document(session, prompt, chat, system, branches, levers or LeverSpec(), request), arrays)
    tensors = {tensor_name(p): torch.from_numpy(a) for p, a in arrays.items()}
    for k, f in enumerate(trace.forwards):  # what each forward kept besides its record
        tensors[f"forwards.{k}.logits"] = f.logits
        for name in ("queries", "lens_inputs"):
            if getattr(f, name) is not None:
                tensors[f"forwards.{k}.{name}"] = getattr(f, name)
    cache, end = trace.cache, trace.end
    kv = [cache.read(layer, end=end) for layer in range(cache.num_layers)]  # (kv_heads, end, d) each
    tensors["cache.keys"] = torch.stack([k for k, _ in kv])  # (layers, kv_heads, end, d)
    tensors["cache.values"] = torch.stack([v for _, v in kv])
    tensors = {n: t.detach().cpu().contiguous() for n, t in tensors.items()}  # safetensors: own, dense storage
    text = json.dumps(doc, ensure_ascii=False)
    metadata = {"format": FORMAT, "version": str(FORMAT_VERSION), "trace": text, "sha256": _digest(text, tensors)}
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, path)
    except (SafetensorError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write the trace to {_shown(str(path))}: {first_line(exc)}") from None
    return path.stat().st_size


def _document(session: Any, prompt: str | None, chat: bool | None, system: str | None,
              branches: SavedTree | None, levers: LeverSpec, request: dict[str, Any] | None) -> TraceDocument:
    loaded, tok = session.loaded, session.tokenizer
    vocab = range(min(session.config.vocab_size, tok.vocab_size))  # ids past the tokenizer's have no piece
    last = session.records[-1].sample
    return TraceDocument(
        model=RecordedModel(loaded.name, str(loaded.source), dtype_name(loaded.dtype), session.config.to_hf(),
                            _fingerprint(session)),
        settings=Settings(prompt, chat, system, last.params if last is not None else None, session.max_new_tokens,
                          session.recompute, session.record, session.lens, session.decoding, levers, request),
        prompt_ids=list(session.prompt_ids),
        generated_ids=list(session.generated_ids),
        pieces=tok.pieces(vocab),  # the whole vocabulary: a reader without the tokenizer shows any id
        specials=[i for i in vocab if tok.is_special(i)],
        text=session.text,
        finished=session.finished,
        eos_ids=sorted(session.eos_ids),
        timings=Timings(session.ttft_ms, list(session.tpot_ms)),
        forwards=[f.record for f in session.trace.forwards],
        branches=branches,
    )


def _check_tree(tree: SavedTree, generated_ids: list[int]) -> None:
    """InputError unless `tree` is a possible tree whose shown branch holds `generated_ids`."""
    check_saved(tree)
    if list(tree.branches[tree.current].generated_ids) != list(generated_ids):
        raise InputError(f"branches: the shown branch {tree.current} does not hold the run's tokens")


def _fingerprint(session: Any) -> str:
    """The recording model's fingerprint: computed from its weights, or carried over by a read-only restore."""
    if session.model is None:
        return session.recorded_model["fingerprint"]
    return model_fingerprint(session.model)


def _digest(doc: str, tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256(doc.encode())
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


# ---- reading
def read_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The JSON document and the tensors of a trace file, checked; one InputError line when it is not one."""
    path = Path(path)
    name = _shown(path.name)
    if not path.is_file():
        raise InputError(f"no trace file at {_shown(str(path))}")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"{name} is not a readable trace file (truncated, or not safetensors): "
                         f"{first_line(exc)}") from None
    if metadata.get("format") != FORMAT:
        raise InputError(f"{name} is a safetensors file but not an inspector trace (no format {FORMAT!r} "
                         f"in its metadata)")
    try:
        version = int(metadata.get("version", ""))
    except ValueError:
        raise InputError(f"{name} is corrupted: bad format version {metadata.get('version')!r}") from None
    if version > FORMAT_VERSION:
        raise InputError(f"{name} is a trace of format version {version}; this inspector reads up to version "
                         f"{FORMAT_VERSION}: upgrade inspector to open it")
    if version < 1:
        raise InputError(f"{name} is corrupted: bad format version {version}")
    try:
        # Cloned: load_file's tensors sit at the file's offsets, unaligned, and SIMD kernels may then sum in
        # another order than on the original's tensors (last-bit differences in attention and sampling).
        tensors = {n: t.clone() for n, t in load_file(str(path)).items()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"{name} is corrupted: {first_line(exc)}") from None
    doc_text = metadata.get("trace", "")
    if _digest(doc_text, tensors) != metadata.get("sha256"):
        raise InputError(f"{name} is corrupted: its contents do not match the checksum it was saved with")
    try:
        doc = json.loads(doc_text)
    except ValueError as exc:
        raise InputError(f"{name} is corrupted: {first_line(exc)}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{name} is corrupted: the trace document is not a JSON object")
    return doc, tensors


def parse_document(doc: Any, tensors: dict[str, torch.Tensor]) -> TraceDocument:
    """The document checked field by field (types, every number's range, the record arrays present);
    InputError naming the first bad field."""
    parsed = from_json(TraceDocument, doc, arrays=RecordArrays(tensors), ranges=RANGES)
    if parsed.model.dtype not in DTYPES:
        raise InputError(f"model.dtype must be one of {', '.join(DTYPES)}, got {parsed.model.dtype!r}")
    params = [parsed.settings.params] + [r.sample.params for r in parsed.forwards if r.sample is not None]
    for p in params:
        if p is not None:
            try:
                p.validate()
            except ValueError as exc:
                raise InputError(f"sampling parameters: {exc}") from None
    try:
        parsed.settings.decoding.validate()
    except InputError as exc:
        raise InputError(f"decoding settings: {exc}") from None
    if parsed.branches is not None:
        _check_tree(parsed.branches, parsed.generated_ids)
    return parsed


def load_trace(path: str | os.PathLike[str], loaded: Any = None) -> RestoredSession:
    """The session saved in `path`; it steps on when `loaded` (a LoadedModel) recorded it, else read-only."""
    doc, tensors = read_trace(path)
    name = _shown(Path(path).name)
    try:
        parsed = parse_document(doc, tensors)
        plain = to_json(parsed, {})  # the same document with every value checked and of its JSON type
        session = RestoredSession(plain, tensors, loaded, _read_only_reason(parsed.model, loaded))
        session.saved_tree = parsed.branches  # the run's branches, for the page to show again
        _restore_levers(session, parsed.settings.levers, loaded)
        return session
    except InputError as exc:
        raise InputError(f"{name} is corrupted: {exc}") from None
    except (InspectorError, KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
        what = f"missing {exc.args[0]!r}" if isinstance(exc, KeyError) else first_line(exc)
        raise InputError(f"{name} is corrupted: {what}") from None


def _restore_levers(session: RestoredSession, spec: LeverSpec, loaded: Any) -> None:
    """Give a session that steps on the interventions it was saved with (`session.lever_spec` says which); a
    run saved with hooks reads but does not step (a hook's function is not in the file)."""
    session.lever_spec = spec
    if session.read_only is not None or spec.is_empty:
        return
    if spec.has_hooks:
        session.read_only = (f"this run was made with hooks at {', '.join(spec.hooks)}, which a trace file cannot "
                             "keep: its saved steps read as recorded; prefill again with the hooks to go on")
        return
    ivs = spec.interventions(loaded.model, loaded.tokenizer.encode, session.prompt_ids)
    session.set_levers(replace(session.own_levers, interventions=ivs))


def _read_only_reason(recorded: RecordedModel, loaded: Any) -> str | None:
    """None when `loaded` is the model that recorded the trace; else the one line a step refuses with."""
    was = f"{recorded.name} ({recorded.dtype}, weights {recorded.fingerprint[:12]})"
    if loaded is None:
        return f"this trace is read-only: it was recorded with {was} and no model is loaded to step on"
    fingerprint = model_fingerprint(loaded.model)
    if fingerprint == recorded.fingerprint and ModelConfig.from_hf(recorded.config) == loaded.config:
        return None
    now = f"{loaded.name} ({dtype_name(loaded.dtype)}, weights {fingerprint[:12]})"
    return f"this trace is read-only: it was recorded with {was}, the loaded model is {now}"


def _shown(text: str, limit: int = 200) -> str:
    """A file name or path on one line (control characters escaped), shortened past `limit` characters."""
    one = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return one if len(one) <= limit else one[:limit] + "..."

