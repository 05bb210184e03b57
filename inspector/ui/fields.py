"""The page's number boxes and sliders: one table of fields (the name shown, the range) and the components
that let every value reach our parser.

Each number a visitor can type is a `Bound` (`inspector.validate`) here, named as its control is labelled
and ranged as the control shows it; handlers parse through these and nothing else, so a bad value is one
line naming the field, the allowed values and what was given ("top-p must be a number in (0, 1], got 2").
The Prefill's controls describe a run: `page_request` builds the `RunRequest` (`inspector.generation.
request`, what the CLI's flags and the API's keywords build too) and checks it once with `PAGE_NAMES`,
these fields' labels and ranges, one line per bad field.
Out-of-range values are refused, never clamped. Ranges that depend on the model (attention layer and head,
early-exit layer) or on the run (selected position, quantization step) are functions of it.

`FreeNumber` and `FreeSlider` are `gr.Number` / `gr.Slider` whose server-side preprocessing hands the value
over as the browser sent it. Gradio's own preprocessing compares the value with the component's minimum and
maximum and rounds it to `precision`: an emptied box arrives as None and `None < 0.0` raises a TypeError
inside Gradio (a ComponentProcessingError and a traceback before any handler runs), NaN fails the rounding
the same way, and an out-of-range value gets Gradio's message, which names no field. These subclasses are
Gradio "templates" (`is_template`, as `gr.ClearButton` is of `gr.Button`): the page draws them with the
built-in Number and Slider, and the range check moves to the handlers, which say which field is wrong.

A slider's number box, when left (blur), sends the typed value in a `release` event and then Gradio's
script clamps the box into the slider's range (an emptied box becomes the minimum); static/app.js puts the
typed value back within the same blur, so a button pressed next sends what was typed and it is refused by
name, never run clamped. Every slider also has a release handler that parses the typed value at once: the
page's sampling sliders redraw the preview, the attention sliders redraw the view, the lab tabs' sliders
`report_on_release` into their status line ("draft length k must be a whole number from 1 to 16, got 99").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from inspector.errors import InputError
from inspector.quant.requested import Checked, Naming, RunRequest, decoding_fields
from inspector.session import settings as gs
from inspector.session.settings import DecodingSettings, SamplingParams
from inspector.ui.panel import NO_LOADING_STATUS
from inspector.validate import MIN_P, SEED, TEMPERATURE, TOP_K, TOP_P, Bound


class FreeNumber(gr.Number):
    """A `gr.Number` whose value reaches the handler unchecked (None, any number): the handler parses it."""

    is_template = True

    def preprocess(self, payload: Any) -> Any:
        return payload


class FreeSlider(gr.Slider):
    """A `gr.Slider` whose value (its number box can be emptied or typed past the ends) reaches the handler
    unchecked: the handler parses it."""

    is_template = True

    def preprocess(self, payload: Any) -> Any:
        return payload


# ---- the page's sampling controls and run length (main page; the lab tabs use the same boxes)
TEMPERATURE_UI = TEMPERATURE.within(hi=2.0)  # the slider's range; the engine takes any temperature >= 0
TOP_K_UI = TOP_K.within(hi=200)
SAMPLING_UI = (TEMPERATURE_UI, TOP_K_UI, TOP_P, MIN_P, SEED)
MAX_NEW = Bound("max new tokens", True)  # its range is the server's cap: `admission.admit_max_new`

PLAY_SPEED = Bound("speed (tokens/s)", False, 1, 20)  # Play's pace (`inspector.ui.play_speed`)

# ---- views
OP_STEP = Bound("step to time", True, -1, note="(-1 = the newest, 0 = the prefill)")  # Timing: time operations
# the Attention view's head atlas: its probe (CLI defaults 48 x 8); the model's context may allow less
HEAD_PROBE_LEN = Bound("probe length n", True, 2, 128)
HEAD_PROBES = Bound("probes K", True, 1, 16)

# ---- lab tabs
DRAFT_LEN = Bound("draft length k", True, 1, 16)
MAX_BATCH = Bound("max batch", True, 1, 16)
CONTINUATIONS = Bound("continuations per request", True, 1, 4)
BLOCK_SIZE = Bound("block size", True, 1, 256)
POOL_BLOCKS = Bound("pool blocks", True, 0, 100_000, note="(0 = a full batch of the longest)")
PREFILL_CHUNK = Bound("prefill chunk", True, 0, 100_000, note="(0 = whole prompts)")
COMPARE_CHUNK = Bound("prefill chunk", True, 1, 100_000)  # the prefix-caching comparison's chunked runs
KV_BUDGET = Bound("budget", True, 1, note="(positions each layer and KV head keeps)")
KV_SINKS = Bound("sinks", True, 1, note="(and below the budget)")
MEM_CONTEXT = Bound("context (tokens)", True, 128, 131072)
MEM_BATCH = Bound("batch", True, 1, 256)
MEM_GIB = Bound("memory (GiB)", True, 1, 192)

# ---- run links: the same fields under their URL keys
STEPS = Bound("steps", True, 0)

# ---- the page's run as a RunRequest: its fields parsed as the controls show them (max new tokens: the server's
# cap and "> 0" are `admission.admit_max_new`'s), the settings panel's with the CLI's bounds, as the panel does
PAGE_NAMES = Naming(
    bounds={"temperature": TEMPERATURE_UI, "top_k": TOP_K_UI, "top_p": TOP_P, "min_p": MIN_P, "seed": SEED,
            "max_new_tokens": MAX_NEW, "repetition_penalty": gs.REPETITION_PENALTY,
            "presence_penalty": gs.PRESENCE_PENALTY, "frequency_penalty": gs.FREQUENCY_PENALTY,
            "no_repeat_ngram_size": gs.NO_REPEAT_NGRAM, "min_new_tokens": gs.MIN_NEW_TOKENS, "num_beams": gs.NUM_BEAMS,
            "length_penalty": gs.LENGTH_PENALTY},
    labels={"system": "system prompt", "logit_bias": "logit bias", "bad_words": "bad words", "stop": "stop strings",
            "json_schema": "JSON schema", "choice": "choices"},
    empty_prompt="the prompt is empty: type something first")


def layer_bound(config: Any) -> Bound:
    """The attention view's layer slider."""
    return Bound("layer", True, 0, config.num_hidden_layers - 1)


def head_bound(config: Any) -> Bound:
    """The attention view's query-head slider."""
    return Bound("query head", True, 0, config.num_attention_heads - 1)


def early_exit_bound(config: Any) -> Bound:
    """The Speculative tab's early-exit layer: 1 .. layers - 1 (a draft with every layer is the model itself)."""
    return Bound("early-exit layer L", True, 1, max(1, config.num_hidden_layers - 1))


def kv_head_bound(config: Any) -> Bound:
    """The KV policy views' KV-head selector."""
    return Bound("KV head", True, 0, config.num_key_value_heads - 1)


def op_runs_bound(max_repeats: int) -> Bound:
    """The Timing view's timed-runs box."""
    return Bound("timed runs", True, 1, max_repeats)


def tile_bound(n_tiles: int) -> Bound:
    """The FlashAttention walk's tile selector (1-based)."""
    return Bound("tile", True, 1, max(1, n_tiles))


def beam_step_bound(n_steps: int) -> Bound:
    """The Beams view's step slider."""
    return Bound("tree after step", True, 1, max(1, n_steps))


def quant_step_bound(positions: int) -> Bound:
    """The Quantization lab's step slider over a run of `positions` steps."""
    return Bound("step", True, 0, positions - 1)


def branch_bound(n_branches: int, name: str = "branch") -> Bound:
    """A branch number of a run with `n_branches` branches."""
    return Bound(name, True, 0, n_branches - 1)


def generated_step_bound(n_generated: int) -> Bound:
    """A generated token's step, -1 for the newest (the Interventions lab's attribution)."""
    return Bound("step", True, -1, n_generated - 1, note="(-1 = the newest)")


def patch_position_bound(n_tokens: int) -> Bound:
    """A position of the corrupted prompt (the Interventions lab's patching cell)."""
    return Bound("position", True, 0, n_tokens - 1)


def arrival_bound(max_steps: int) -> Bound:
    """A Serving lab request's arrival step (a later one would never be served)."""
    return Bound("arrival step", True, 0, max_steps)


def requests_bound(n_questions: int) -> Bound:
    """How many requests the prefix-caching comparison serves."""
    return Bound("requests", True, 2, n_questions)


def position_bound(newest: int) -> Bound:
    """The selected-position box: -1 (the newest) or a position the run has reached."""
    return Bound("selected position", True, -1, newest, note="(-1 = newest)")


def sampling_params(temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any) -> SamplingParams:
    """The page's sampling controls -> SamplingParams in the controls' ranges; NumberError naming the first
    bad field otherwise."""
    t, k, p, m, s = (b.parse(v) for b, v in zip(SAMPLING_UI, (temperature, top_k, top_p, min_p, seed)))
    return SamplingParams(temperature=float(t), top_k=int(k), top_p=float(p), min_p=float(m), seed=int(s))


def page_request(prompt: Any, chat: Any, system: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any,
                 seed: Any, max_new: Any, decoding: DecodingSettings) -> Checked:
    """The run the Prefill's controls describe (`decoding`: the settings panel's, beam search aside: the Beams tab
    runs it), checked once: a `RequestError` with one line per bad field, named as its control is labelled."""
    panel = {**decoding_fields(decoding), "num_beams": 1, "length_penalty": 1.0}
    request = RunRequest.of(prompt=prompt if isinstance(prompt, str) else "", chat=bool(chat),
                            system=system if isinstance(system, str) and system.strip() else None,
                            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                            max_new_tokens=max_new, **panel)
    return request.checked(PAGE_NAMES)


def slider(bound: Bound, value: float | int, step: float, label: str, elem_id: str, **kwargs: Any) -> FreeSlider:
    """A slider over `bound`'s range (its number box takes any text: the handler refuses what is out of it)."""
    lo = bound.lo if bound.lo is not None else 0
    hi = bound.hi if bound.hi is not None and bound.hi > lo else lo + step  # a slider needs min < max
    return FreeSlider(lo, hi, value, step=step, label=label, elem_id=elem_id, **kwargs)


def release_check(bound: Bound, status_html: Callable[..., str]) -> Callable[[Any], Any]:
    """The handler `report_on_release` binds: a value outside `bound` -> `status_html(message, error=True)`;
    a good value leaves the status as it is (`gr.skip()`)."""
    def check(value: Any) -> Any:
        try:
            bound.parse(value)
        except InputError as exc:
            return status_html(str(exc), error=True)
        return gr.skip()
    return check


def report_on_release(box: FreeSlider, bound: Bound, status: Any, status_html: Callable[..., str]) -> None:
    """When the slider's number box is left with a value outside `bound`, the tab's status line says so at
    once. No model work, not queued."""
    box.release(release_check(bound, status_html), [box], [status], queue=False, **NO_LOADING_STATUS,
                api_visibility="undocumented")
