"""A run described once: `RunRequest`, frozen, what the CLI's flags, the Python API's keywords and the page's
fields (`inspector.ui.fields.page_request`) each build, checked in one place and written as one JSON form.

The fields are `inspector run`'s flags by their dest (`--top-p` is `top_p`), in the CLI's order: the model
(model, dtype, device, attention), the prompt (prompt text or token `ids`, chat, system, max_new_tokens),
sampling (temperature, top_k, top_p, min_p, seed), decoding processors and constraints (penalties, bans,
stop strings, json_schema: a JSON Schema's text, regex, choice) and beams (num_beams, length_penalty), interventions in
the flags' forms ("L.H", "L", "L.H=F", steer L: `lever_spec(cfg)` reads them as a `LeverSpec` against the
model), the run's options (no_cache, quant, kv_quant, on_context_full, speculative, draft_len) and a KV-cache
eviction policy (policy, budget, sinks: `inspector kv-eval`'s names).

`RunRequest.from_keywords(given)` checks each keyword as its flag checks it (a numeric flag's `Bound`, a
flag's choices, a switch's True/False; a repeatable flag takes one value or a list, and `logit_bias` a dict
{id: bias} too) and refuses unknown names; `check()` checks the whole description: every value again (a
description read from JSON was never parsed) and which fields combine, and gives the `SamplingParams` and
`DecodingSettings` the run uses (`checked()` also the request of the parsed values). Both raise one
`InputError` with one line per bad field, in the flags' names (`--top-p`), with `names="keywords"` the
keywords' (`top_p`), or with a front end's `Naming` its controls' labels and ranges (the page's: "top-p must
be a number in (0, 1], got 2"). `from_flags` reads `--json-schema`'s file: the request holds the schema's
text, as the page's box and the API's keyword give it. `to_json()` / `from_json()` is the one JSON form
(with a "version" key). This module imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from inspector.errors import InputError, InputTypeError, first_line
from inspector.generation import settings as s
from inspector.generation.request_checks import Checked, Naming, RequestError, clashes
from inspector.validate import MIN_P, SEED, TEMPERATURE, TOP_K, TOP_P, Bound, NumberError, shown

VERSION = 2  # 2: json_schema holds the schema's text (in version 1, the path of a file holding it)
# Lengths: at least one; the upper limit is the model's context window, checked after loading it.
MAX_NEW_TOKENS = Bound("max-new-tokens", True, 1)
DRAFT_LEN = Bound("draft-len", True, 1)
DEFAULT_DRAFT_LEN = 5
# Interventions: layers and heads depend on the model and are checked once it is loaded.
STEER_LAYER = Bound("steer layer", True, 0)
STEER_ALPHA = Bound("steer-alpha", False, 0, 1000, note="(swap the prompts to steer the other way)")
# A KV-cache eviction policy (`inspector kv-eval`'s).
BUDGET = Bound("budget", True, 1, note="(positions each layer keeps)")
SINKS = Bound("sinks", True, 1, note="(and below the budget)")
DTYPES = ("fp32", "bf16")
ATTENTIONS = ("standard", "tiled")
CONTEXT_FULL = ("stop", "window")
FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def _f(default: Any, bound: Bound | None = None, choices: tuple[str, ...] | None = None,
       keyword: bool = True) -> Any:
    """A field: its default, its check (a Bound or choices), and whether `Model.prefill` takes it by name."""
    return field(default=default, metadata={"bound": bound, "choices": choices, "keyword": keyword})


@dataclass(frozen=True)
class RunRequest:
    # the model
    model: str | None = _f(None, keyword=False)
    dtype: str = _f("fp32", choices=DTYPES, keyword=False)
    device: str = _f("cpu", keyword=False)
    attention: str = _f("standard", choices=ATTENTIONS, keyword=False)
    # the prompt
    prompt: str | None = _f(None, keyword=False)
    ids: tuple[int, ...] | None = _f(None, keyword=False)  # token ids fed as given, instead of the prompt's text
    system: str | None = _f(None)
    chat: bool = _f(False)
    max_new_tokens: int = _f(64, MAX_NEW_TOKENS)
    # sampling
    temperature: float = _f(0.0, TEMPERATURE)
    top_k: int = _f(0, TOP_K)
    top_p: float = _f(1.0, TOP_P)
    min_p: float = _f(0.0, MIN_P)
    seed: int = _f(0, SEED)
    # decoding processors, constraints and beams
    repetition_penalty: float = _f(1.0, s.REPETITION_PENALTY)
    presence_penalty: float = _f(0.0, s.PRESENCE_PENALTY)
    frequency_penalty: float = _f(0.0, s.FREQUENCY_PENALTY)
    no_repeat_ngram_size: int = _f(0, s.NO_REPEAT_NGRAM)
    logit_bias: tuple[str, ...] = _f(())  # "ID=V"
    bad_words: tuple[str, ...] = _f(())
    min_new_tokens: int = _f(0, s.MIN_NEW_TOKENS)
    stop: tuple[str, ...] = _f(())
    num_beams: int = _f(1, s.NUM_BEAMS)
    length_penalty: float = _f(1.0, s.LENGTH_PENALTY)
    json_schema: str | None = _f(None)  # a JSON Schema, its text (`from_flags` reads --json-schema's file)
    regex: str | None = _f(None)
    choice: tuple[str, ...] = _f(())
    # interventions, in the flags' forms
    ablate_head: tuple[str, ...] = _f(())  # "L.H"
    ablate_mlp: tuple[str, ...] = _f(())  # "L"
    scale_head: tuple[str, ...] = _f(())  # "L.H=F"
    steer: int | None = _f(None, STEER_LAYER)
    steer_towards: str | None = _f(None)
    steer_away: str | None = _f(None)
    steer_alpha: float = _f(4.0, STEER_ALPHA)
    ablate: str = _f("zero", keyword=False)  # how ablate_head ablates: "zero" | "mean" (`LeverSpec`)
    # the run's options
    no_cache: bool = _f(False)
    quant: str | None = _f(None)
    kv_quant: str | None = _f(None)
    on_context_full: str = _f("stop", choices=CONTEXT_FULL)
    speculative: str | None = _f(None)
    draft_len: int | None = _f(None, DRAFT_LEN)
    # a KV-cache eviction policy
    policy: str = _f("full", keyword=False)
    budget: int | None = _f(None, BUDGET, keyword=False)
    sinks: int = _f(4, SINKS, keyword=False)

    # ---- building
    @classmethod
    def of(cls, **values: Any) -> RunRequest:
        """A request of these values as parsed (argparse's lists as tuples), unchecked: `check()` checks it."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})

    @classmethod
    def from_flags(cls, args: Mapping[str, Any]) -> RunRequest:
        """The request of `inspector run`'s parsed flags (by dest), unchecked; --json-schema's file read."""
        values = {name: args[name] for name in NAMES if name in args}
        if values.get("json_schema") is not None:
            values["json_schema"] = schema_file(values["json_schema"])
        return cls.of(**values)

    @classmethod
    def from_keywords(cls, given: Mapping[str, Any], also: tuple[str, ...] = (), **fixed: Any) -> RunRequest:
        """The request of `Model.prefill`'s keywords (`KEYWORDS`), each checked as its flag checks it (one line
        per bad keyword); `fixed` sets fields the caller decides and has checked; `also` names the caller's
        own keywords for the unknown-name message."""
        values, lines = dict(fixed), []
        for name, value in given.items():
            if name not in KEYWORDS:
                raise InputError(f"unknown keyword {name!r}: the keywords are {', '.join([*KEYWORDS, *also])}")
            try:
                values[name] = keyword_value(name, value)
            except InputError as exc:
                lines.append(first_line(exc))
        if lines:
            raise InputError("\n".join(lines))
        return cls.of(**values)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunRequest:
        """The request of `to_json()`'s object (InputError for another version or an unknown field)."""
        if not isinstance(doc, Mapping) or doc.get("version") not in (1, VERSION):
            raise InputError(f"a run request is a JSON object with version 1 or {VERSION}, got "
                             f"{shown(doc.get('version') if isinstance(doc, Mapping) else doc)}")
        unknown = sorted(set(doc) - set(NAMES) - {"version"})
        if unknown:
            raise InputError(f"unknown field(s) in the run request: {', '.join(unknown)}")
        values = {k: v for k, v in doc.items() if k != "version"}
        if doc["version"] == 1 and isinstance(values.get("json_schema"), str):  # a path then: read its text now
            values["json_schema"] = schema_file(values["json_schema"])
        return cls.of(**values)

    def to_json(self) -> dict[str, Any]:
        """The one JSON form: {"version": VERSION, field: value, ...}, tuples as lists."""
        return {"version": VERSION, **{k: list(v) if isinstance(v, tuple) else v for k, v in self._items()}}

    def _items(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    # ---- checks
    @property
    def wants_interventions(self) -> bool:
        return bool(self.ablate_head or self.ablate_mlp or self.scale_head or self.steer is not None
                    or self.steer_towards or self.steer_away)

    def check(self, names: str | Naming = "flags", save_trace: bool = False) -> tuple[Any, s.DecodingSettings]:
        """The run's `SamplingParams` and `DecodingSettings` once the whole description is `checked`."""
        return self.checked(names, save_trace).run

    def checked(self, names: str | Naming = "flags", save_trace: bool = False) -> Checked:
        """The description checked once, no model needed: every field parsed, then which fields combine. A
        `RequestError` with one line per bad field or pair of fields that do not combine, named by `names`
        ("flags", "keywords" or a front end's `Naming`); `save_trace`: the run is to be written as a trace file."""
        lines: list[tuple[str | None, str]] = []
        values: dict[str, Any] = {}
        for name, value in self._items():
            try:
                values[name] = _parse(name, value, names)
            except InputError as exc:
                lines.append((name, _named(name, first_line(exc), names)))
        if isinstance(self.prompt, str) and not self.prompt.strip():  # None: token ids instead
            lines.append(("prompt", names.empty_prompt if isinstance(names, Naming) else "prompt is empty"))
        parsed, params, settings = self, None, None
        if not lines:
            parsed = replace(self, **values)
            params = parsed.sampling_params(parsed=True)
            settings = _attempt(lines, parsed.decoding_settings)
        if params is not None and settings is not None:
            lines += [(None, line) for line in clashes(parsed, params, settings, save_trace)]
        if lines:
            raise RequestError([(f, line if names == "flags" else keyword(line)) for f, line in lines])
        return Checked(parsed, params, settings)

    def sampling_params(self, parsed: bool = False) -> Any:
        """The `SamplingParams` (InputError in one line when out of range; `parsed`: `checked` parsed them)."""
        from inspector.engine.config import SamplingParams

        params = SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                                min_p=self.min_p, seed=self.seed)
        try:
            if not parsed:
                params.validate()
        except ValueError as exc:
            raise InputError(str(exc)) from None
        return params

    def decoding_settings(self) -> s.DecodingSettings:
        """The validated decoding settings (`ID=V` biases parsed, the constraint compiled)."""
        if self.json_schema is not None and not self.json_schema.strip():
            raise InputError("--json-schema is empty: give a JSON Schema object")
        if self.regex is not None and not self.regex:
            raise InputError("--regex is empty: give a regular expression the output must match")
        if self.choice and not any(self.choice):
            raise InputError("the --choice list is empty: give at least one non-empty string")
        settings = s.DecodingSettings(
            repetition_penalty=self.repetition_penalty, presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty, no_repeat_ngram_size=self.no_repeat_ngram_size,
            logit_bias=s.parse_logit_bias(list(self.logit_bias)), bad_words=tuple(self.bad_words),
            min_new_tokens=self.min_new_tokens, stop=tuple(self.stop), num_beams=self.num_beams,
            length_penalty=self.length_penalty, json_schema=self.json_schema or "", regex=self.regex or "",
            choices=tuple(self.choice))
        settings.validate()
        settings.check_beams()
        if settings.constraint is not None:  # refuse a bad schema / regex before any model loads
            from inspector.generation.constraints import check_grammar

            check_grammar(*settings.constraint)
        return settings

    # ---- what the run is made with
    def lever_spec(self, cfg: Any) -> Any:
        """The `LeverSpec` of the intervention fields, every layer and head checked against `cfg`."""
        from inspector.generation import interventions as ivs  # torch: imported once a model is loaded
        from inspector.generation.lever_spec import LeverSpec

        if self.steer is not None or self.steer_towards or self.steer_away:
            if self.steer is None:
                raise InputError("--steer-towards / --steer-away need --steer L (the layer to steer at)")
            if not (self.steer_towards or "").strip() or not (self.steer_away or "").strip():
                raise InputError("--steer needs two non-empty prompts: --steer-towards TEXT and --steer-away TEXT")
        spec = LeverSpec(
            ablate_head=tuple(ivs.parse_head(h, cfg) for h in self.ablate_head), ablate=self.ablate,
            ablate_mlp=tuple(ivs.check_layer(cfg, layer) for layer in self.ablate_mlp),
            scale_head=tuple(ivs.parse_scaled_head(h, cfg) for h in self.scale_head),
            steer=None if self.steer is None else ivs.check_layer(cfg, self.steer),
            steer_towards=self.steer_towards if self.steer is not None else None,
            steer_away=self.steer_away if self.steer is not None else None,
            steer_alpha=float(self.steer_alpha))
        spec.check()
        return spec

    def cache_policy(self) -> Any:
        """A fresh eviction policy object (None: "full", the whole cache)."""
        from inspector.generation.cache_policies import POLICIES, make_policy

        if self.policy not in POLICIES:
            raise InputError(f"policy must be one of {', '.join(POLICIES)} (int8 / int4 caches: kv_quant or "
                             f"Model.kv_eval), got {self.policy!r:.40}")
        budget = None if self.budget is None else BUDGET.parse(self.budget)
        sinks = SINKS.parse(self.sinks)
        return None if self.policy == "full" else make_policy(self.policy, budget, sinks)


def _attempt(lines: list[tuple[str | None, str]], make: Any) -> Any:
    try:
        return make()
    except InputError as exc:
        lines.append((None, first_line(exc)))
        return None


def _parse(name: str, value: Any, names: str | Naming) -> Any:
    bound = names.bounds.get(name) if isinstance(names, Naming) else None
    return field_value(name, value) if bound is None else bound.parse(value)


def _named(name: str, line: str, names: str | Naming) -> str:
    """A field's refusal (written with the field's name when the field's own check refused it) in `names`."""
    if isinstance(names, Naming) and name in names.bounds or not line.startswith(name):
        return line
    label = names.labels.get(name, name) if isinstance(names, Naming) else "--" + name.replace("_", "-")
    return (label if names != "keywords" else name) + line[len(name):]


def schema_file(path: str) -> str:
    """The text of --json-schema's file (InputError when it cannot be read or is empty)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, TypeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise InputError(f"cannot read the JSON schema file {path!r}: {why}") from None
    if not text.strip():
        raise InputError(f"the JSON schema file {path!r} is empty: give a JSON Schema object")
    return text


NAMES = tuple(f.name for f in fields(RunRequest))
DEFAULTS = {f.name: f.default for f in fields(RunRequest)}
KEYWORDS = tuple(f.name for f in fields(RunRequest) if f.metadata["keyword"])  # `Model.prefill`'s, by name
_META = {f.name: f.metadata for f in fields(RunRequest)}


def keyword(text: str) -> str:
    """A message with every `--flag-name` written as the keyword `flag_name`."""
    return FLAG.sub(lambda m: m.group(1).replace("-", "_"), text)


@contextlib.contextmanager
def keyword_errors() -> Iterator[None]:
    """Re-raise an InputError written with flags' names with keyword names instead (its class kept: an
    `InputTypeError` stays a TypeError)."""
    try:
        yield
    except InputError as exc:
        raise type(exc)(keyword(first_line(exc))) from None


@dataclass(frozen=True)
class Keywords:
    """Some fields taken as keyword arguments: their names, in the CLI's order, and defaults."""

    names: tuple[str, ...]

    def defaults(self) -> dict[str, Any]:
        return {n: DEFAULTS[n] for n in self.names}


def keyword_value(name: str, value: Any) -> Any:
    """One keyword's value, checked as its flag checks it (InputError naming the keyword)."""
    default = DEFAULTS[name]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InputError(f"{name} must be True or False, got {shown(value)}")
        return value
    if name == "json_schema" and isinstance(value, Mapping):  # a JSON Schema object for its text
        value = json.dumps(value)
    if isinstance(default, tuple):
        if isinstance(value, Mapping):  # logit_bias={id: v} for ["ID=V", ...]
            value = [f"{k}={v}" for k, v in value.items()]
        items = [value] if isinstance(value, (str, int, float)) else value
        if not isinstance(items, (list, tuple)):
            raise InputError(f"{name} takes one value or a list of them, got {shown(value)}")
        return tuple(_one(name, v) for v in items)
    if value is None and default is None:
        return None
    return _one(name, value)


def _one(name: str, value: Any) -> Any:
    bound, choices = _META[name]["bound"], _META[name]["choices"]
    if bound is not None:
        return bounded(bound, value, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and choices is None:
        value = str(value)  # "ID=V", "L.H", a layer: the flags read them as text
    elif not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {shown(value)}")
    if choices is not None and value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}, got {shown(value)}")
    return value


def bounded(bound: Bound, value: Any, name: str) -> Any:
    """`value` parsed by a numeric flag's `Bound`, a refusal naming the keyword `name`."""
    try:
        return bound.parse(value)
    except NumberError as exc:
        text = str(exc)
        raise InputError(name + text[len(bound.name):] if text.startswith(bound.name) else text) from None


def field_value(name: str, value: Any) -> Any:
    """One field of a request checked as it stands (a numeric field's range, a field's choices, token ids)."""
    if name == "ids":
        if value is not None and not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            raise InputTypeError(f"ids must hold token ids (whole numbers from 0), got {shown(value)}")
        return value
    if name in ("model", "device", "ablate", "policy", "prompt"):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{name} must be a string, got {shown(value)}")
        return value
    return keyword_value(name, value)
