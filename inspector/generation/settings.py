"""`DecodingSettings`: everything between the logits and the token besides the four sampling knobs — the
penalties, bans and constraints a run's processors are built from, and beam search — as plain data.

The same settings give the same tokens wherever they come from (CLI flags, the page's sampling panel, a
run link, a trace file): each of those turns its input into this dataclass (`from_dict` for stored ones;
missing keys read as the defaults, which change nothing), and `inspector.generation.decoding` builds the
processors from it. `validate()` refuses out-of-range values with one line (InputError) naming what is
allowed; the `Bound`s here are the ones the CLI flags use. This module imports no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from inspector.errors import InputError
from inspector.validate import Bound

MAX_BEAMS = 16
REPETITION_PENALTY = Bound("repetition-penalty", False, 0, lo_open=True, note="(1 = off; > 1 discourages repeats)")
PRESENCE_PENALTY = Bound("presence-penalty", False, -2, 2, note="(0 = off)")
FREQUENCY_PENALTY = Bound("frequency-penalty", False, -2, 2, note="(0 = off)")
NO_REPEAT_NGRAM = Bound("no-repeat-ngram-size", True, 0, note="(0 = off)")
MIN_NEW_TOKENS = Bound("min-new-tokens", True, 0, note="(0 = off)")
NUM_BEAMS = Bound("num-beams", True, 1, MAX_BEAMS, note="(1 = no beam search)")
LENGTH_PENALTY = Bound("length-penalty", False, -3, 3, note="(1 = logprob / length; > 0 favours longer output)")
LOGIT_BIAS = Bound("logit bias", False, -100, 100)
TOKEN_ID = Bound("logit-bias token id", True, 0)


@dataclass(frozen=True)
class DecodingSettings:
    repetition_penalty: float = 1.0  # `transformers` rule, over every id so far
    presence_penalty: float = 0.0  # OpenAI rule, over generated ids
    frequency_penalty: float = 0.0  # OpenAI rule, over generated ids
    no_repeat_ngram_size: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias)
    bad_words: tuple[str, ...] = ()  # text; each banned as tokenized, with and without a leading space
    min_new_tokens: int = 0  # EOS banned before this many generated tokens
    stop: tuple[str, ...] = ()  # stop strings: the text is cut before the first one, finish "stop_string"
    num_beams: int = 1
    length_penalty: float = 1.0  # beam search: hypotheses scored logprob / length ** length_penalty
    json_schema: str = ""  # constraints, at most one: a JSON Schema (its text), a regex, or choices
    regex: str = ""
    choices: tuple[str, ...] = ()

    @property
    def constraint(self) -> tuple[str, Any] | None:
        """("json_schema", text) | ("regex", text) | ("choice", strings) | None."""
        if self.json_schema:
            return "json_schema", self.json_schema
        if self.regex:
            return "regex", self.regex
        if self.choices:
            return "choice", self.choices
        return None

    @property
    def is_default(self) -> bool:
        return self == DecodingSettings()

    def validate(self) -> None:
        """InputError (one line naming what is allowed) on any value out of range or combination refused."""
        REPETITION_PENALTY.parse(self.repetition_penalty)
        PRESENCE_PENALTY.parse(self.presence_penalty)
        FREQUENCY_PENALTY.parse(self.frequency_penalty)
        NO_REPEAT_NGRAM.parse(self.no_repeat_ngram_size)
        MIN_NEW_TOKENS.parse(self.min_new_tokens)
        NUM_BEAMS.parse(self.num_beams)
        LENGTH_PENALTY.parse(self.length_penalty)
        for token, bias in self.logit_bias:
            TOKEN_ID.parse(token)
            LOGIT_BIAS.parse(bias)
        if any(not w.strip() for w in self.bad_words):
            raise InputError("a bad word is empty: give the text to ban")
        if any(not s for s in self.stop):
            raise InputError("a stop string is empty: give the text to stop at")
        if self.choices and any(not c for c in self.choices):
            raise InputError("a choice is empty: each choice is the text the output must equal")
        if sum(map(bool, (self.json_schema, self.regex, self.choices))) > 1:
            raise InputError("give one constraint: --json-schema, --regex or --choice, not several")

    def check_beams(self) -> None:
        """InputError when beam search (num_beams > 1) is asked for together with what it does not support."""
        if self.num_beams > 1 and self.constraint is not None:
            raise InputError("beam search runs without a grammar constraint: drop --json-schema / --regex / "
                             "--choice, or use --num-beams 1")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, only the fields that differ from the defaults."""
        default = DecodingSettings()
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "DecodingSettings":
        """From `to_dict` (or any subset of it); unknown keys refused, missing ones the defaults; validated."""
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"unknown decoding setting {unknown[0]!r}: known are {', '.join(sorted(names))}")
        kw: dict[str, Any] = {}
        for key, value in d.items():
            if key == "logit_bias":
                kw[key] = tuple((TOKEN_ID.parse(t), LOGIT_BIAS.parse(b)) for t, b in value)
            elif key in ("bad_words", "stop", "choices"):
                if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                    raise InputError(f"{key} must be a list of strings")
                kw[key] = tuple(value)
            elif key in ("json_schema", "regex"):
                kw[key] = value if isinstance(value, str) else json.dumps(value)
            else:
                bound = BOUNDS[key]
                kw[key] = bound.parse(value)
        out = cls(**kw)
        out.validate()
        return out


BOUNDS = {"repetition_penalty": REPETITION_PENALTY, "presence_penalty": PRESENCE_PENALTY,
          "frequency_penalty": FREQUENCY_PENALTY, "no_repeat_ngram_size": NO_REPEAT_NGRAM,
          "min_new_tokens": MIN_NEW_TOKENS, "num_beams": NUM_BEAMS, "length_penalty": LENGTH_PENALTY}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [list(v) if isinstance(v, tuple) else v for v in value]
    return value


def parse_logit_bias(items: list[str]) -> tuple[tuple[int, float], ...]:
    """["ID=V", ...] (CLI `--logit-bias`, the page's box) -> ((id, bias), ...); InputError on a bad item."""
    out = []
    for item in items:
        token, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"logit bias must be ID=VALUE (e.g. 1234=-5), got {item!r}")
        out.append((TOKEN_ID.parse(token), LOGIT_BIAS.parse(value)))
    return tuple(out)

