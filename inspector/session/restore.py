"""A saved trace back into a session: records to and from JSON, and `RestoredSession`.

Records are read with the generic `inspector.session.codec.from_json`; their arrays (`ARRAY_FIELDS`)
travel apart, as tensors. `RestoredSession(doc, tensors, loaded, read_only)` rebuilds what a `Session`
holds from a trace document (`inspector.session.trace_file`): the records, the tensors each forward kept
(fp32 logits, post-RoPE queries, logit-lens inputs) and the KV cache of the committed positions, so every
view equals the original's: attention is computed from the same queries and cached keys, the logit lens
and samples are read from the records, sampling previews redraw from the same fp32 logits.

With the recording model loaded (`read_only` None) the session steps on like the original. Otherwise
(another model, or none) it is read-only: the views work, and every call that would run the model or
draw a new token (prefill, step, resample, branch, recompute) raises InputError with `read_only`, the one
line saying why (it names both models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inspector.engine import steps
from inspector.engine.config import ModelConfig, SamplingParams
from inspector.engine.kv_cache import KVCache
from inspector.engine.recording import NORM_POINTS, POST_NORM_POINTS
from inspector.errors import InputError
from inspector.generation.sequence import Sequence
from inspector.generation.settings import DecodingSettings
from inspector.models.tokenizer import NO_PIECE
from inspector.session.codec import from_json
from inspector.session.records import ForwardRecord
from inspector.session.session import Session
from inspector.session.trace_store import Forward, TraceStore

ARRAY_FIELDS = (*NORM_POINTS, "logits")  # the ForwardRecord fields saved as tensors, not JSON
ROUTING_ARRAYS = ("expert_ids", "expert_weights", "router_probs")  # RoutingRecord's, saved as routing.<field>
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---- what a read-only session uses instead of the model and its tokenizer
class TracePieces:
    """The tokenizer a read-only session has: the saved display piece of every id and the special ids."""

    eos_id = None

    def __init__(self, pieces: list[str], specials: set[int]) -> None:
        self._pieces, self._specials = pieces, specials
        self.vocab_size = len(pieces)

    def piece(self, token_id: int) -> str:
        return self._pieces[token_id] if 0 <= token_id < len(self._pieces) else NO_PIECE.format(token_id)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def is_special(self, token_id: int) -> bool:
        return token_id in self._specials


@dataclass
class TracedModel:
    """Who recorded a read-only trace, standing where a session keeps its `LoadedModel` (no weights)."""

    name: str
    source: str
    config: ModelConfig
    tokenizer: TracePieces
    dtype: torch.dtype
    model: None = None
    stop_ids: frozenset[int] = frozenset()


class RestoredTrace(TraceStore):
    """A `TraceStore` over forwards and a cache read from a file; `model` is None when read-only."""

    def __init__(self, config: ModelConfig, model: Any, piece: Any, cache: KVCache, forwards: list[Forward]) -> None:
        self.model, self.config, self.piece = model, config, piece
        self.cache = cache
        self.forwards = forwards
        self.pending = None
        self.overview_ahead = None


# ---- the session
class RestoredSession(Session):
    """A `Session` rebuilt from a trace document; steps on only when `read_only` is None."""

    def __init__(self, doc: dict[str, Any], tensors: dict[str, torch.Tensor], loaded: Any,
                 read_only: str | None) -> None:
        recorded, settings = doc["model"], doc["settings"]
        self.recorded_model = recorded  # name, source, dtype, config, fingerprint of the recording model
        self.settings = settings  # prompt, chat, system, params (the newest step's), max_new_tokens, flags
        self.saved_tree: Any = None  # the run's SavedTree when the file kept one (`load_trace` sets it)
        self.read_only = read_only
        flags = {k: bool(settings[k]) for k in ("recompute", "record", "lens")}
        eos_ids = frozenset(int(i) for i in doc["eos_ids"])
        if read_only is not None:  # no model: what the views need, from the file
            config = ModelConfig.from_hf(recorded["config"], name=recorded["name"])
            tokenizer = TracePieces([str(p) for p in doc["pieces"]], {int(i) for i in doc["specials"]})
            loaded = TracedModel(recorded["name"], recorded["source"], config, tokenizer, DTYPES[recorded["dtype"]])
        config, model = loaded.config, loaded.model
        forwards = [_forward(d, k, tensors) for k, d in enumerate(doc["forwards"])]
        generated = [int(i) for i in doc["generated_ids"]]
        _check_shapes(config, forwards, tensors["cache.keys"], tensors["cache.values"], len(generated))
        cache = _cache(config, model, tensors["cache.keys"], tensors["cache.values"])
        trace = RestoredTrace(config, model, loaded.tokenizer.piece, cache, forwards)
        # the detokenizer's state (a character may be half-way) as the original left it, when there is a model
        seq = Sequence([int(i) for i in doc["prompt_ids"]], int(settings["max_new_tokens"]),
                       config.max_position_embeddings, stop_ids=eos_ids, cache=cache,
                       tokenizer=loaded.tokenizer if read_only is None else None)
        seq.restore(generated, doc["finished"], str(doc["text"]))
        super().__init__(loaded, **flags, restored=(trace, seq))
        self.request = settings.get("request")  # the RunRequest JSON it was saved with (None: not kept)
        self.eos_ids = eos_ids
        self.max_new_tokens = seq.max_new_tokens
        decoding = DecodingSettings.from_dict(settings.get("decoding"))
        if read_only is None:
            self.set_decoding(decoding)  # the run steps on with the penalties and constraint it had
        else:
            self.decoding = decoding

    def _writable(self) -> None:
        if self.read_only is not None:
            raise InputError(self.read_only)

    def prefill(self, *args: Any, **kwargs: Any) -> ForwardRecord:
        self._writable()
        return super().prefill(*args, **kwargs)

    def prefill_ids(self, *args: Any, **kwargs: Any) -> ForwardRecord:
        self._writable()
        return super().prefill_ids(*args, **kwargs)

    def step(self, params: SamplingParams) -> ForwardRecord:
        self._writable()
        return super().step(params)

    def forward_ahead(self, lens: bool = False, commitment: bool = False, overview: bool = False) -> bool:
        return self.read_only is None and super().forward_ahead(lens, commitment, overview)

    def branch(self, step: int, token_id: int) -> None:
        self._writable()
        super().branch(step, token_id)

    def resample(self, params: SamplingParams) -> ForwardRecord:
        self._writable()
        return super().resample(params)

    def recompute_last_step(self) -> tuple[float, float]:
        self._writable()
        return super().recompute_last_step()


def _forward(d: dict[str, Any], k: int, tensors: dict[str, torch.Tensor]) -> Forward:
    """Forward k: its record and the tensors it kept (queries and lens inputs absent when not recorded)."""
    name = f"forwards.{k}."
    arrays = {p: tensors[name + p].numpy() for p in NORM_POINTS}
    arrays["logits"] = tensors[name + "logits_fp16"].numpy()
    for p in ROUTING_ARRAYS:  # a mixture of experts' routing (a record whose `routing` is set needs all three)
        if name + "routing." + p in tensors:
            arrays["routing." + p] = tensors[name + "routing." + p].numpy()
    record = from_json(ForwardRecord, d, arrays=arrays)
    for p in POST_NORM_POINTS:  # optional arrays (families with post-norms): the reader fills only required ones
        if name + p in tensors:
            setattr(record, p, tensors[name + p].numpy())
    return Forward(record, tensors[name + "logits"], tensors.get(name + "queries"), tensors.get(name + "lens_inputs"))


def _check_shapes(cfg: ModelConfig, forwards: list[Forward], keys: torch.Tensor, values: torch.Tensor,
                  n_generated: int) -> None:
    """ValueError unless the tensors have the shapes the config and the records say (the views index them)."""
    L, H, KV, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    if not forwards or len(forwards) != n_generated:
        raise ValueError(f"{len(forwards)} forwards for {n_generated} generated tokens")
    start = 0
    for f in forwards:
        rec, n = f.record, f.record.n_new
        if rec.start_pos != start:
            raise ValueError(f"step {rec.step} starts at position {rec.start_pos}, not {start}")
        start = rec.positions.stop
        want = {"logits": (cfg.vocab_size,), "record logits": (cfg.vocab_size,)}
        got = {"logits": tuple(f.logits.shape), "record logits": rec.logits.shape}
        if f.queries is not None:
            want["queries"], got["queries"] = (L, H, n, d), tuple(f.queries.shape)
            want["norms"], got["norms"] = (L, n), rec.resid_post.shape
        if f.lens_inputs is not None:
            want["lens inputs"], got["lens inputs"] = (L, cfg.hidden_size), tuple(f.lens_inputs.shape)
        if rec.routing is not None:
            k, E = cfg.num_experts_per_tok, cfg.num_experts
            for what, shape in (("expert_ids", (L, n, k)), ("expert_weights", (L, n, k)), ("router_probs", (L, n, E))):
                want[f"routing {what}"], got[f"routing {what}"] = shape, tuple(getattr(rec.routing, what).shape)
        for what, shape in want.items():
            if got[what] != shape:
                raise ValueError(f"step {rec.step}'s {what} have shape {got[what]}, expected {shape}")
    for what, t in (("keys", keys), ("values", values)):
        if tuple(t.shape) != (L, KV, start, d):
            raise ValueError(f"cache {what} have shape {tuple(t.shape)}, expected {(L, KV, start, d)}")


def _cache(config: ModelConfig, model: Any, keys: torch.Tensor, values: torch.Tensor) -> KVCache:
    """A cache holding `keys`/`values` (layers, kv_heads, positions, head_dim) as its committed positions."""
    cache = steps.new_cache(model) if model is not None else KVCache(config, dtype=keys.dtype)
    n = keys.shape[2]
    if n:
        for layer in range(config.num_hidden_layers):
            cache.update(layer, keys[layer][None], values[layer][None])  # (1, kv_heads, n, head_dim)
        cache.advance(n)
    return cache
