"""How a run's description (`inspector.generation.request.RunRequest`) is refused: the pairs of fields that
do not combine (`clashes`, written with the flags' names), a front end's names for the fields (`Naming`),
the one error with one line per bad field (`RequestError`), what a check gives (`Checked`), and the fields
of a run's `DecodingSettings` (`decoding_fields`, the way back from `RunRequest.decoding_settings`). This
module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.generation.settings import BOUNDS, DecodingSettings
from inspector.validate import Bound


@dataclass(frozen=True)
class Checked:
    """A checked description: the request of the parsed values, and the settings the run uses."""

    request: Any  # the RunRequest of the parsed values
    params: Any  # inspector.engine.config.SamplingParams
    settings: DecodingSettings

    @property
    def run(self) -> tuple[Any, DecodingSettings]:
        return self.params, self.settings


class RequestError(InputError):
    """A refused description: one line per bad field (`fields[i]` names the field of `lines[i]`, None for a
    line about fields together)."""

    def __init__(self, named: list[tuple[str | None, str]]) -> None:
        named = list(dict.fromkeys(named))
        self.fields, self.lines = tuple(f for f, _ in named), tuple(line for _, line in named)
        super().__init__("\n".join(dict.fromkeys(self.lines)))


@dataclass(frozen=True)
class Naming:
    """A front end's names for the fields: `bounds` {field: its control's Bound}, which parses that field in
    the control's range and names it as labelled (replacing the field's own Bound: a server's cap is checked
    after), `labels` {field: label} for the other fields, and the line for an empty prompt."""

    bounds: Mapping[str, Bound]
    labels: Mapping[str, str]
    empty_prompt: str


def clashes(request: Any, params: Any, settings: DecodingSettings, save_trace: bool) -> list[str]:
    """One line per pair of fields of `request` (a `RunRequest`) that do not combine (flags' names)."""
    spec, quant = request.speculative is not None, bool(request.quant or request.kv_quant)
    rules: list[tuple[bool, str]] = []
    if settings.num_beams == 1:
        rules.append((settings.length_penalty != 1.0,
                      "--length-penalty scores beam hypotheses: add --num-beams B (B >= 2)"))
    else:
        dropped = [flag for flag, on in (("--temperature > 0", params.temperature > 0), ("--speculative", spec),
                                         ("--quant", request.quant), ("--kv-quant", request.kv_quant),
                                         ("--save-trace", save_trace), ("--no-cache", request.no_cache),
                                         ("--stop", settings.stop)) if on]
        rules.append((bool(dropped), f"--num-beams runs greedy beam search over the loaded model: drop "
                                     f"{', '.join(dropped)}"))
    rules += [
        (spec and not settings.is_default,
         "--speculative runs plain sampling: drop the penalty, ban, stop and constraint flags"),
        (not spec and request.draft_len is not None, "--draft-len needs --speculative ngram|early-exit:L"),
        (spec and request.no_cache, "--speculative verifies drafts against the KV cache: drop --no-cache"),
        (save_trace and (spec or quant),
         "--save-trace saves a plain run of the loaded model: drop --speculative / --quant / --kv-quant"),
        (spec and request.on_context_full != "stop",
         "--on-context-full window applies to plain decoding: drop --speculative"),
        (request.wants_interventions and (spec or quant or settings.num_beams > 1),
         "interventions run on a plain run of the loaded model: "
         "drop --speculative / --quant / --kv-quant / --num-beams"),
        (spec and quant, "--speculative runs the loaded model's weights: drop --quant / --kv-quant"),
    ]
    return [line for on, line in rules if on]


def decoding_fields(settings: DecodingSettings) -> dict[str, Any]:
    """The request fields of decoding settings (what `decoding_settings()` gives back)."""
    plain = {k: getattr(settings, k) for k in BOUNDS}
    return {**plain, "logit_bias": tuple(f"{t}={b!r}" for t, b in settings.logit_bias),
            "bad_words": settings.bad_words, "stop": settings.stop, "json_schema": settings.json_schema or None,
            "regex": settings.regex or None, "choice": settings.choices}
