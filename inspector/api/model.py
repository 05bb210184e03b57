"""`load()` and `Model`: a loaded model and the runs it makes, with `inspector run`'s levers as keywords.

`load(source, dtype=, device=, attention=)` is `inspector.models.loader.load_model` (the engine's own
load; no app start-up), with `--dtype`, `--device` and `--attention` checked as the CLI checks them.
`Model.prefill(prompt or ids=, ...)` reads its keywords (heads and layers in Python's forms first:
`inspector.api.lever_keywords`) into a `RunRequest` (`inspector.generation.request`: the run described once,
each keyword checked as its flag is), then `Model.start(request)` runs it, as `inspector run` does with the
request of its flags: the request's checks, its interventions (`LeverSpec`; a mean-ablation averages over the
prompt's ids) plus the hooks (`inspector.api.hooks`), its session (`session_for`: decoding processors,
quantized weights or KV cache, a KV-cache eviction policy: `policy=`, `budget=`, `sinks=`, `inspector
kv-eval`'s names, the page's KV view policies), then one prefill of the token ids; `speculative=` gives a
`SpeculativeRun` over the same drafters. The analyses (`attribute`, `patch`, `loss`, `kv_eval`, `quant`, `beam_search`,
`head_scores`, `head_ablation`) are in `inspector.api.analyses`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from inspector.api import analyses, lever_keywords
from inspector.api.args import text_or_ids, token_ids
from inspector.api.hooks import hook_interventions
from inspector.api.run import Run
from inspector.engine.trace import model_hook_names
from inspector.errors import InputError, InputTypeError, InspectorError, first_line
from inspector.generation.cache_policies import KeepAll
from inspector.generation.levers import Levers
from inspector.generation.request import KEYWORDS, Keywords, RunRequest, keyword_errors, keyword_value
from inspector.quant.requested import session_for

if TYPE_CHECKING:
    from inspector.api.speculative import SpeculativeRun
    from inspector.models.inventory import Inventory
    from inspector.models.loader import LoadedModel


POLICY_KEYWORDS = ("policy", "budget", "sinks")  # `inspector kv-eval`'s names, the eviction policies only
RUN_FLAGS = Keywords(KEYWORDS)  # what `Model.prefill` takes by name besides its own parameters


def load(source: str | os.PathLike[str] | None = None, *, dtype: str = "fp32", device: str = "cpu",
         attention: str = "standard") -> Model:
    """Load a model: None (the embedded default, SmolLM2-135M-Instruct), a name ("gemma3-270m"), a Hugging
    Face directory, a GGUF file or a Hub repo id; dtype "fp32" | "bf16"; device "cpu" | "cuda" | "mps";
    attention "standard" | "tiled" (FlashAttention's tiles: the same numbers up to float rounding; fp32 logits
    within 6e-5 of the standard path's on the default model, as measured in the README). InputError on anything refused (a source not found, a wrong
    dtype, a device not present)."""
    import torch

    from inspector.engine.model import set_attention
    from inspector.models.loader import load_model

    dtype, device, attention = (keyword_value(n, v) for n, v in (("dtype", dtype), ("device", device),
                                                                 ("attention", attention)))
    try:
        loaded = load_model(None if source is None else os.fspath(source),
                            dtype=torch.bfloat16 if dtype == "bf16" else torch.float32, device=device)
    except TypeError:
        raise InputTypeError(f"source must be a model name, a path or a Hub repo id, got {source!r:.40}") from None
    except InspectorError as exc:  # a source not found or not convertible: one line, as the CLI prints it
        raise InputError(first_line(exc)) from None
    set_attention(loaded.model, attention)
    return Model(loaded)


class Model:
    """A loaded model: tokenize, prefill runs (with levers), run the analyses the CLI runs."""

    def __init__(self, loaded: LoadedModel) -> None:
        """Wrap an `inspector.models.loader.LoadedModel` (what `load()` gives)."""
        self.loaded = loaded

    def __repr__(self) -> str:
        c = self.config
        return (f"<inspector Model {self.name}: {c.model_type}, {c.num_hidden_layers} layers, "
                f"{c.num_attention_heads} heads ({c.num_key_value_heads} KV), vocab {c.vocab_size}, "
                f"{self.dtype}, {self.loaded.device}>")

    @property
    def name(self) -> str:
        """The model's name, e.g. "SmolLM2-135M-Instruct"."""
        return self.loaded.name

    @property
    def config(self) -> Any:
        """Its `inspector.engine.config.ModelConfig` (the Hugging Face config keys)."""
        return self.loaded.config

    @property
    def dtype(self) -> str:
        """The weights' dtype: "float32" or "bfloat16"."""
        return str(self.loaded.dtype).replace("torch.", "")

    # ---- text
    def tokenize(self, text: str, *, chat: bool = False, system: str | None = None) -> list[int]:
        """The token ids of `text` as a prompt (with the chat template when `chat`; `system` its system prompt).
        Text does not always round-trip (`tokenize(decode(ids))` may differ from ids): give ids with `ids=`."""
        if not isinstance(text, str):
            raise InputTypeError(f"text must be a string, got {type(text).__name__}")
        return self.loaded.tokenizer.prompt_ids(text, chat, system)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The display piece of every token id (an id the tokenizer has no piece for, in a model whose
        embedding has more rows than the tokenizer has pieces, shows as "<no piece #ID>")."""
        return self.loaded.tokenizer.pieces(token_ids(ids, self.config.vocab_size, allow_empty=True))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (an id without a piece adds nothing, as `transformers`' decode skips it)."""
        return self.loaded.tokenizer.decode(token_ids(ids, self.config.vocab_size, allow_empty=True))

    def hook_names(self) -> list[str]:
        """Every trace point of this model, in the order a forward emits them (TransformerLens-style names:
        hooks and `run.cache` take them; `inspector.engine.trace` gives each one's shape)."""
        return model_hook_names(self.config)

    @cached_property
    def _inventory(self) -> Inventory:
        from inspector.models.inventory import build_inventory

        return build_inventory(self.loaded)

    def inventory(self) -> Inventory:
        """Every weight tensor (name, shape, dtype, parameters, bytes, group) and the totals the page shows."""
        return self._inventory

    # ---- runs
    def prefill(self, prompt: str | None = None, *, ids: Sequence[int] | None = None,
                hooks: Mapping[str, Callable] | None = None, ablate: str = "zero", chat: bool = False,
                system: str | None = None, max_new_tokens: int = 64, temperature: float = 0.0, top_k: int = 0,
                top_p: float = 1.0, min_p: float = 0.0, seed: int = 0, **levers: Any) -> Run | SpeculativeRun:
        """Run the prefill of `prompt` (text, tokenized) or of `ids` (token ids, fed as given: exactly one of
        the two) and sample the first token: a `Run` to step.

        `hooks` {trace point: fn(value, hook)}: functions called at those points in every forward of this run
        (`inspector.api.hooks`: None reads, a tensor writes). Keywords are `inspector run`'s flags with `-` as
        `_`, same meanings, defaults and ranges: the prompt's (chat: the chat template, system: its system
        prompt, max_new_tokens), sampling (temperature 0 = greedy, top_k, top_p, min_p, seed), decoding
        processors (repetition_penalty, presence_penalty, frequency_penalty, no_repeat_ngram_size,
        logit_bias {id: bias} or ["ID=V"], bad_words, min_new_tokens, stop, json_schema (a JSON Schema: its
        text or a dict), regex, choice), interventions (ablate_head: a head (5, 3) or "5.3", or a list of them; ablate "zero" |
        "mean" says how (mean: the head's mean output over the prompt); ablate_mlp a layer or a list;
        scale_head (5, 3, 0.5) or "5.3=0.5"; steer L with steer_towards, steer_away, steer_alpha; negative
        layers and heads count from the end), quant "int8" | "int4[:GROUP]" | "bf16", kv_quant "int8",
        no_cache, on_context_full "stop" | "window", speculative "ngram" | "early-exit:L" with draft_len (a
        `SpeculativeRun`), and a KV-cache eviction policy: policy "window" | "sinks" | "h2o" | "snapkv" with
        budget and sinks (`inspector kv-eval`'s). num_beams > 1 (with length_penalty) is
        `Model.beam_search`. The run records every forward (what its views read); the logit lens and every
        other analysis are computed when asked (`run.lens`, `run.cache`, ...)."""
        cfg = self.config
        text_or_ids(prompt, ids)
        if ids is not None:
            ids = token_ids(ids, cfg.vocab_size)
            if chat or system is not None:
                raise InputError("chat and system wrap text in the chat template: token ids are fed as given")
        policy = {k: levers.pop(k) for k in POLICY_KEYWORDS if k in levers}
        levers = lever_keywords.normalized(levers, cfg)
        given = dict(chat=chat, system=system, max_new_tokens=max_new_tokens, temperature=temperature,
                     top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, **levers)
        request = RunRequest.from_keywords(given, (*POLICY_KEYWORDS, "ids", "hooks", "ablate"), prompt=prompt,
                                           ids=None if ids is None else tuple(ids), ablate=ablate,
                                           device=self.loaded.device, **policy)
        if request.num_beams > 1:
            raise InputError("beam search runs as its own search: use Model.beam_search(prompt, num_beams=B)")
        return self.start(request, hooks=hooks)

    def start(self, request: RunRequest, *, hooks: Mapping[str, Callable] | None = None,
              record: bool = True, names: str = "keywords") -> Run | SpeculativeRun:
        """Prefill the run `request` describes (`inspector.generation.request.RunRequest`, checked here) on
        this model: what `prefill` does once its keywords are read, and what `inspector run` calls with its
        flags' request. `record`: keep every forward's record (what the views read; a speculative run's top
        tokens); `names`: refusals name "keywords" (top_p) or "flags" (--top-p)."""
        cfg = self.config
        cache_policy = request.cache_policy()
        params, settings = request.check(names=names)
        with keyword_errors() if names == "keywords" else contextlib.nullcontext():
            spec = request.lever_spec(cfg)
            hook_ivs = () if hooks is None else hook_interventions(hooks, model_hook_names(cfg))  # names: ~70 us
            if hook_ivs and (request.speculative is not None or request.quant or request.kv_quant):
                raise InputError("hooks run on a plain run of the loaded model: drop speculative / quant / kv_quant")
            if request.speculative is not None:
                if cache_policy is not None:
                    raise InputError("speculative runs plain decoding: drop policy")
                from inspector.api.speculative import start

                return start(self, request, params, keep_top=record)
            if cache_policy is not None and (request.quant or request.kv_quant):
                raise InputError("a KV-cache policy runs on the loaded model's own cache: drop quant / kv_quant")
            t0 = time.perf_counter()
            ids = None if request.ids is None else list(request.ids)
            prompt_ids = self.loaded.tokenizer.prompt_ids(request.prompt, request.chat, request.system) \
                if ids is None else ids
            tokenize_ms = (time.perf_counter() - t0) * 1e3 if ids is None else 0.0
            if not prompt_ids:
                raise InputError("prompt is empty")
            run_levers = Levers(cache_policy=cache_policy or KeepAll(), interventions=spec.interventions(
                self.loaded.model, self.loaded.tokenizer.encode, prompt_ids) + hook_ivs)
            session = session_for(request, self.loaded, settings, record=record, levers=run_levers)
            session.prefill_ids(prompt_ids, params, max_new_tokens=request.max_new_tokens, tokenize_ms=tokenize_ms,
                                checked=True)  # `request.check` above checked params
        spec = replace(spec, hooks=tuple(iv.point for iv in hook_ivs))
        return Run(session, params, model=self, prompt=request.prompt, chat=request.chat, system=request.system,
                   unsaveable=_unsaveable(request, cache_policy), levers=spec, request=request)

    # ---- analyses: the CLI commands' results (`inspector.api.analyses`)
    attribute = analyses.attribute
    patch = analyses.patch
    loss = analyses.loss
    kv_eval = analyses.kv_eval
    quant = analyses.quant
    beam_search = analyses.beam_search
    head_scores = analyses.head_scores
    head_ablation = analyses.head_ablation


def _unsaveable(request: RunRequest, cache_policy: Any) -> str | None:
    """Why a run's trace file would not reproduce it, else None: a trace file keeps the interventions
    (`LeverSpec`), not quantized weights or caches or an eviction policy's state."""
    kept = [name for name, on in (("quant", request.quant), ("kv_quant", request.kv_quant),
                                  ("policy", cache_policy is not None)) if on]
    if not kept:
        return None
    return (f"save writes a run of the loaded model with its interventions (a trace file keeps no quantized "
            f"weights or cache, nor an eviction policy): this run has {', '.join(kept)}")
