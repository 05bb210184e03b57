"""`load()` and `Model`: a loaded model and the runs it makes, with `inspector run`'s levers as keywords.

`load(source, dtype=, device=, attention=)` is `inspector.models.loader.load_model` (the engine's own
load; no app start-up), with the CLI's `--dtype`, `--device` and `--attention` checked as the CLI checks
them. `Model.prefill(prompt, ...)` builds the run exactly as `inspector run` does: the flags' Namespace
from the keywords (`inspector.api.options`), the run command's checks (`commands.run.check_args`), its
session (`commands.run.new_session`: interventions, decoding processors, quantized weights or KV cache),
then one prefill; `speculative=` gives a `SpeculativeRun` over the same drafters. A KV-cache eviction
policy (`policy=`, `budget=`, `sinks=`: `inspector kv-eval`'s names, the page's KV view policies) goes into
the session's levers. The analyses (`attribute`, `patch`, `loss`, `kv_eval`, `quant`, `beam_search`,
`head_scores`, `head_ablation`) are in `inspector.api.analyses`.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from inspector.api import analyses
from inspector.api.options import LOAD_FLAGS, POLICY_KEYWORDS, RUN_FLAGS, keyword_errors
from inspector.api.run import Run
from inspector.commands.kv_eval import BUDGET, SINKS
from inspector.commands.run import DEFAULT_DRAFT_LEN, check_args, new_session
from inspector.errors import InputError, InspectorError, first_line

if TYPE_CHECKING:
    from inspector.api.speculative import SpeculativeRun
    from inspector.models.inventory import Inventory
    from inspector.models.loader import LoadedModel



def load(source: str | os.PathLike[str] | None = None, *, dtype: str = "fp32", device: str = "cpu",
         attention: str = "standard") -> Model:
    """Load a model: None (the embedded default, SmolLM2-135M-Instruct), a name ("gemma3-270m"), a Hugging
    Face directory, a GGUF file or a Hub repo id; dtype "fp32" | "bf16"; device "cpu" | "cuda" | "mps";
    attention "standard" | "tiled" (FlashAttention's tiles, the same numbers). InputError on anything
    refused (a source not found, a wrong dtype, a device not present)."""
    import torch

    from inspector.engine.model import set_attention
    from inspector.models.loader import load_model

    ns = LOAD_FLAGS.namespace({"dtype": dtype, "device": device, "attention": attention})
    try:
        loaded = load_model(None if source is None else os.fspath(source),
                            dtype=torch.bfloat16 if ns.dtype == "bf16" else torch.float32, device=ns.device)
    except TypeError:
        raise InputError(f"source must be a model name, a path or a Hub repo id, got {source!r:.40}") from None
    except InspectorError as exc:  # a source not found or not convertible: one line, as the CLI prints it
        raise InputError(first_line(exc)) from None
    set_attention(loaded.model, ns.attention)
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
        """The token ids of `text` as a prompt (with the chat template when `chat`; `system` its system prompt)."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        return self.loaded.tokenizer.prompt_ids(text, chat, system)

    def pieces(self, ids: list[int]) -> list[str]:
        """The display piece of every token id."""
        vocab = self.config.vocab_size
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < vocab]
        if bad:
            raise InputError(f"token ids are whole numbers from 0 to {vocab - 1}, got {bad[0]!r:.40}")
        return self.loaded.tokenizer.pieces([int(i) for i in ids])

    def decode(self, ids: list[int]) -> str:
        """The text of token ids."""
        self.pieces(ids)  # checks them
        return self.loaded.tokenizer.decode([int(i) for i in ids])

    @cached_property
    def _inventory(self) -> Inventory:
        from inspector.models.inventory import build_inventory

        return build_inventory(self.loaded)

    def inventory(self) -> Inventory:
        """Every weight tensor (name, shape, dtype, parameters, bytes, group) and the totals the page shows."""
        return self._inventory

    # ---- runs
    def prefill(self, prompt: str, *, chat: bool = False, system: str | None = None, max_new_tokens: int = 64,
                temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, seed: int = 0,
                **levers: Any) -> Run | SpeculativeRun:
        """Tokenize `prompt`, run the prefill and sample the first token: a `Run` to step.

        Keywords are `inspector run`'s flags with `-` as `_`, same meanings, defaults and ranges: the prompt's
        (chat: the chat template, system: its system prompt, max_new_tokens), sampling (temperature 0 =
        greedy, top_k, top_p, min_p, seed), decoding processors (repetition_penalty,
        presence_penalty, frequency_penalty, no_repeat_ngram_size, logit_bias {id: bias} or ["ID=V"],
        bad_words, min_new_tokens, stop, json_schema (a file), regex, choice), interventions (ablate_head
        "L.H" or a list, ablate_mlp, scale_head "L.H=F", steer L with steer_towards, steer_away,
        steer_alpha), quant "int8" | "int4[:GROUP]" | "bf16", kv_quant "int8", no_cache,
        on_context_full "stop" | "window", speculative "ngram" | "early-exit:L" with draft_len (a
        `SpeculativeRun`), and a KV-cache eviction policy: policy "window" | "sinks" | "h2o" | "snapkv" with
        budget and sinks (`inspector kv-eval`'s). num_beams > 1 (with length_penalty) is
        `Model.beam_search`."""
        policy = {k: levers.pop(k) for k in POLICY_KEYWORDS if k in levers}
        given = dict(chat=chat, system=system, max_new_tokens=max_new_tokens, temperature=temperature,
                     top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, **levers)
        if not isinstance(prompt, str):
            raise InputError(f"prompt must be a string, got {type(prompt).__name__}")
        args = RUN_FLAGS.namespace(given, POLICY_KEYWORDS, prompt=prompt, save_trace=None, json=False, model=None,
                                   device=self.loaded.device, dtype=None, attention=None)
        if args.num_beams > 1:
            raise InputError("beam search runs as its own search: use Model.beam_search(prompt, num_beams=B)")
        cache_policy = _policy(**policy)
        with keyword_errors():
            params, settings = check_args(args)
            if args.speculative is not None:
                if cache_policy is not None:
                    raise InputError("speculative runs plain decoding: drop policy")
                from inspector.api.speculative import start

                return start(self, args, params, DEFAULT_DRAFT_LEN if args.draft_len is None else args.draft_len)
            if cache_policy is not None and (args.quant or args.kv_quant):
                raise InputError("a KV-cache policy runs on the loaded model's own cache: drop quant / kv_quant")
            session = new_session(args, self.loaded, settings, record=True)
            if cache_policy is not None:
                session.set_levers(replace(session.own_levers, cache_policy=cache_policy))
            session.prefill(prompt, params, chat=args.chat, system=args.system, max_new_tokens=args.max_new_tokens)
        return Run(session, params, model=self, prompt=prompt, chat=args.chat, system=args.system,
                   unsaveable=_unsaveable(args, cache_policy))

    # ---- analyses: the CLI commands' results (`inspector.api.analyses`)
    attribute = analyses.attribute
    patch = analyses.patch
    loss = analyses.loss
    kv_eval = analyses.kv_eval
    quant = analyses.quant
    beam_search = analyses.beam_search
    head_scores = analyses.head_scores
    head_ablation = analyses.head_ablation


def _policy(policy: str = "full", budget: int | None = None, sinks: int = 4) -> Any:
    """A fresh eviction policy object from kv-eval's names, each checked as kv-eval checks it (None: "full",
    the whole cache)."""
    from inspector.generation.cache_policies import POLICIES, make_policy

    if policy not in POLICIES:
        raise InputError(f"policy must be one of {', '.join(POLICIES)} (int8 / int4 caches: kv_quant or "
                         f"Model.kv_eval), got {policy!r:.40}")
    budget = None if budget is None else BUDGET.parse(budget)
    sinks = SINKS.parse(sinks)
    return None if policy == "full" else make_policy(policy, budget, sinks)


def _unsaveable(args: Any, cache_policy: Any) -> str | None:
    """Why a run's trace file would not reproduce it (a trace file keeps no levers), else None."""
    kept = [name for name, on in (("quant", args.quant), ("kv_quant", args.kv_quant),
                                  ("interventions", args.ablate_head or args.ablate_mlp or args.scale_head
                                   or args.steer is not None), ("policy", cache_policy is not None)) if on]
    if not kept:
        return None
    return f"save writes a plain run of the loaded model (a trace file keeps no levers): this run has {', '.join(kept)}"
