"""Constrained decoding: a token mask that forces the output to match a JSON Schema, a regular expression
or one of several strings, computed by llguidance (the grammar engine of Guidance, used by vLLM, SGLang
and llama.cpp; chosen over xgrammar and outlines-core for its mask time, install size and no torch
dependency: see bench/constrained.py).

`GrammarMask(kind, spec, tokenizer, prompt_len, eos_ids)` is a logits processor named "grammar": tokens the
grammar does not allow next get -inf. It is a function of the ids it is given: the matcher's state (which
does cost to build) is a cache of the generated ids it has consumed; a call with other ids rewinds it to
their common prefix (llguidance `rollback`) and consumes the rest, so re-draws, branches and previews see
the mask their own ids call for. When the grammar is complete only EOS is allowed; when nothing is
allowed (a dead end: a token forced against the grammar, or earlier stages such as bad words having
banned every token the grammar allows) EOS gets logit 0 and everything else -inf, so the run ends with
finish reason "eos" instead of drawing from an empty distribution. `check_grammar(kind, spec, tokenizer)` refuses a schema that is
not valid JSON Schema, a regex that does not compile or an empty choice list (InputError, one line).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from inspector.errors import InputError

KINDS = ("json_schema", "regex", "choice")
_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # ours -> llguidance's (~0.4 s)


def ll_tokenizer(tokenizer: Any, eos_ids: Sequence[int]) -> Any:
    """llguidance's token table for our tokenizer (built once per tokenizer object)."""
    import llguidance

    key = _TOKENIZERS.get(tokenizer)
    if key is None or key[0] != tuple(eos_ids):
        ll = llguidance.LLTokenizer(tokenizer.to_json(), n_vocab=tokenizer.vocab_size,
                                    eos_token=list(eos_ids) or None)
        _TOKENIZERS[tokenizer] = key = (tuple(eos_ids), ll)
    return key[1]


def grammar_text(kind: str, spec: Any) -> str:
    """The llguidance grammar of a constraint; InputError when the spec cannot be one."""
    from llguidance import LLMatcher

    if kind == "json_schema":
        try:
            schema = json.loads(spec) if isinstance(spec, str) else spec
        except json.JSONDecodeError as exc:
            raise InputError(f"the JSON schema is not valid JSON ({exc.msg} at line {exc.lineno}): "
                             "give a JSON Schema object") from None
        if not isinstance(schema, dict):
            raise InputError("the JSON schema must be a JSON object (a JSON Schema), "
                             f"got {type(schema).__name__}")
        return LLMatcher.grammar_from_json_schema(schema)
    if kind == "regex":
        if not spec:
            raise InputError("the regex is empty: give a regular expression the output must match")
        return LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        choices = [c for c in spec if c]
        if not choices:
            raise InputError("the choice list is empty: give at least one string the output must equal")
        return LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in choices))
    raise InputError(f"unknown constraint {kind!r}: known are {', '.join(KINDS)}")


def check_grammar(kind: str, spec: Any, tokenizer: Any = None, eos_ids: Sequence[int] = ()) -> str:
    """The grammar text, after llguidance accepted it; InputError with its complaint otherwise."""
    from llguidance import LLMatcher

    grammar = grammar_text(kind, spec)
    ll = ll_tokenizer(tokenizer, eos_ids) if tokenizer is not None else None
    error = LLMatcher.validate_grammar(grammar, ll)
    if error and not error.startswith("WARNING"):
        what = {"json_schema": "the JSON schema is not a JSON Schema llguidance supports",
                "regex": "the regex does not compile", "choice": "the choices do not form a grammar"}[kind]
        raise InputError(f"{what}: {error.splitlines()[0][:200]}")
    return grammar


class GrammarMask:
    """Logits processor: -inf for every token the grammar does not allow after the generated ids."""

    name = "grammar"

    def __init__(self, kind: str, spec: Any, tokenizer: Any, prompt_len: int, eos_ids: Sequence[int]) -> None:
        from llguidance import LLMatcher

        self.kind, self.spec = kind, spec
        self.prompt_len, self.eos_ids = prompt_len, tuple(eos_ids)
        self._ll = ll_tokenizer(tokenizer, self.eos_ids)
        self._grammar = check_grammar(kind, spec, tokenizer, self.eos_ids)
        self._new_matcher = lambda: LLMatcher(self._ll, self._grammar, log_level=0)
        self._matcher = self._new_matcher()
        self._seen: list[int] = []  # generated ids the matcher has consumed
        self._lock = threading.Lock()

    def allowed(self, generated: Sequence[int], vocab: int) -> torch.Tensor:
        """(vocab,) bool: the tokens the grammar allows after `generated` (EOS only at an end or a dead end)."""
        with self._lock:
            self._sync(list(generated))
            m = self._matcher
            ok = np.zeros(vocab, dtype=bool)
            if not m.is_error():
                bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")
                n = min(vocab, bits.shape[0])  # the model's vocabulary may be padded past the tokenizer's
                ok[:n] = bits[:n]
        if not ok.any():
            ok[[e for e in self.eos_ids if e < vocab]] = True
        return torch.from_numpy(ok)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        keep = self.allowed(ids[self.prompt_len:], logits.shape[-1]).to(logits.device)
        out = logits.masked_fill(~keep, float("-inf"))
        if not bool(torch.isfinite(out).any()):  # earlier stages banned all the grammar allows: end here
            out = torch.full_like(logits, float("-inf"))
            out[..., [e for e in self.eos_ids if e < logits.shape[-1]]] = 0.0
        return out

    def _sync(self, generated: list[int]) -> None:
        """Bring the matcher to the state after `generated`: rewind to the common prefix, consume the rest."""
        seen = self._seen
        common = 0
        while common < min(len(seen), len(generated)) and seen[common] == generated[common]:
            common += 1
        m = self._matcher
        if common < len(seen) and (m.is_error() or not m.rollback(len(seen) - common)):
            self._matcher, common = self._new_matcher(), 0  # an error state is final: start over
        self._seen = generated[:common]
        for t in generated[common:]:
            if not self._matcher.consume_token(t):  # a token against the grammar: a dead end from here on
                break
            self._seen.append(t)
        if len(self._seen) < len(generated):
            self._seen = generated[:]  # remember the ids that led to the error state
