"""The analyses as `Model` methods, which the CLI's commands call after parsing their flags (`inspector
attribute` is `Model.attribute`, `heads` is `head_scores` and `head_ablation`, `run --num-beams` is
`beam_search`), so `result.to_json()` (a dict for `kv_eval`, `summary()` for `quant`) is what `inspector
<command> --json` prints for the same input, timings apart. Each method computes with `inspector.api.measures`.
Token arguments (`token`, `answer`, `wrong`) are one token's text or "#ID", as the flags take them, or an
int id. `inspector.figure(result)` draws a result with the page's lab builders.

Refusals name the keywords (`token`); every method also takes `names="flags"`, which the CLI passes, to have
them name its flags instead (`--token`): one `InputError` path, two spellings (`refusals`). The checks that
need no model (`check_prompt`, `check_patch_texts`, `check_quant`, `kv_spec`) are checks the methods make
first (the same functions and messages), so a command can refuse bad input before it loads a model.

Adding an analysis: one function here taking the `Model` first, calling its computation in `measures`, then
one line in `Model` (`name = analyses.name`) and a command calling it. The head atlas (`inspector heads`) is
two methods: its scores (`head_scores`, the JSON's "heads" and "probe") and its causal check
(`head_ablation`, its "ablation").
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from inspector.api.args import text_or_ids, token_ids
from inspector.api.measures import POINTS, PREFILL, check_patch_texts, check_prompt
from inspector.errors import InputError, InputTypeError
from inspector.generation.request import BUDGET, SINKS, bounded, keyword_errors
from inspector.validate import shown

if TYPE_CHECKING:
    from inspector.analysis.findings import Attribution, PatchSweep, TokenLosses, TrainingStep
    from inspector.analysis.head_findings import HeadAblation, HeadAtlas
    from inspector.models.loader import LoadedModel
    from inspector.generation.beam_tree import BeamRecord
    from inspector.generation.request import RunRequest
    from inspector.quant.kv_eval import CacheSpec
    from inspector.quant.measurements import FidelityRecord

__all__ = ["POINTS", "PREFILL", "POSITIONS", "NAMES", "refusals", "check_prompt", "check_patch_texts", "check_quant",
           "kv_spec", "attribute", "patch", "loss", "kv_eval", "quant", "beam_search", "head_scores", "head_ablation"]
POSITIONS = ("original", "contiguous")  # kv_eval's: evicted entries masked, or the cache compacted and re-rotated
NAMES = ("keywords", "flags")  # how refusals name the arguments: `token` (Python) or `--token` (the CLI)


class Model(Protocol):
    """What an analysis reads of `inspector.api.model.Model` (which imports this module: a protocol, so no
    import goes back)."""

    loaded: LoadedModel

    @property
    def config(self) -> Any: ...


def refusals(names: str = "keywords") -> contextlib.AbstractContextManager[None]:
    """Where refusals are raised: with `names="keywords"` a message naming a flag (`--token`) names the keyword
    (`token`) instead; with "flags" (the CLI's) it is left as it is."""
    if names == "flags":
        return contextlib.nullcontext()
    if names != "keywords":
        raise InputError(f"names must be one of {', '.join(NAMES)}, got {shown(names)}")
    return keyword_errors()


def _named(name: str, names: str) -> str:
    """An argument's name as a refusal writes it: the keyword (`top_k`) or the CLI's flag (`--top-k`)."""
    return name if names == "keywords" else "--" + name.replace("_", "-")


def check_quant(quant: str, kv_quant: str | None = None) -> None:
    """InputError for a quantization scheme or KV precision `quant` does not know (no model needed)."""
    from inspector.quant.schemes import parse_kv, parse_scheme

    parse_scheme(_text(quant, "quant")), parse_kv(kv_quant)


def kv_spec(policy: str, budget: int | None = None, sinks: int = 4, positions: str = "original",
            names: str = "keywords") -> CacheSpec:
    """The checked `CacheSpec` of `kv_eval`'s policy arguments (no model needed)."""
    from inspector.quant.kv_eval import CacheSpec

    if positions not in POSITIONS:
        raise InputError(f"{_named('positions', names)} must be one of {', '.join(POSITIONS)}, got {positions!r:.40}")
    spec = CacheSpec(_text(policy, "policy"), None if budget is None else BUDGET.parse(budget), SINKS.parse(sinks),
                     positions == "contiguous")
    with refusals(names):
        spec.check()
    return spec


def _token(value: str | int | None, name: str) -> str | None:
    """A token argument as its flag takes it: text, or "#ID" for an int id."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"#{int(value)}"
    raise InputTypeError(f"{name} must be one token's text or its id (an int), got {type(value).__name__}")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputTypeError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _ids(self: Model, text: Any, ids: Any, name: str, chat: bool = False, system: str | None = None) -> list[int] | None:
    """The given token ids checked (None when text is given); exactly one of the two."""
    text_or_ids(text, ids, name)
    if ids is None:
        return None
    if chat or system is not None:
        raise InputError("chat and system wrap text in the chat template: token ids are fed as given")
    return token_ids(ids, self.config.vocab_size)


def attribute(self: Model, prompt: str | None = None, *, ids: Sequence[int] | None = None, chat: bool = False,
              system: str | None = None, token: str | int | None = None, names: str = "keywords") -> Attribution:
    """Direct logit attribution of the next token (`inspector attribute`) after `prompt` (text) or `ids`
    (token ids): its logit (the top-1, or `token`) split into the embedding, every head and every MLP.
    `names`: refusals name "keywords" or the CLI's "flags" (`refusals`)."""
    from inspector.api.measures import attribution

    given = _ids(self, prompt, ids, "prompt", chat, system)
    with refusals(names):
        return attribution(self.loaded, prompt, chat=chat, system=system, token=_token(token, "token"), ids=given)


def patch(self: Model, clean: str | Sequence[int], corrupt: str | Sequence[int], answer: str | int,
          wrong: str | int, *, point: str = "resid_pre", names: str = "keywords") -> PatchSweep:
    """Activation patching over every layer x position (`inspector patch`): the logit difference recovered
    when `point` ("resid_pre" | "attn_out" | "mlp_out") of the clean run replaces the corrupted run's.
    `clean` and `corrupt` are both texts or both token ids (of one length). `names`: as `attribute`'s."""
    from inspector.api.measures import patching

    given = None
    if not isinstance(clean, str) or not isinstance(corrupt, str):
        given = (token_ids(clean, self.config.vocab_size, "clean"), token_ids(corrupt, self.config.vocab_size, "corrupt"))
        clean = corrupt = None
    with refusals(names):
        return patching(self.loaded, clean, corrupt, _token(answer, "answer"), _token(wrong, "wrong"),
                        _text(point, "point"), ids=given)


def loss(self: Model, text: str | None = None, *, ids: Sequence[int] | None = None,
         grad_norms: bool = False, names: str = "keywords") -> TokenLosses | TrainingStep:
    """`text` (or token `ids`) teacher-forced (`inspector loss`): per-token cross-entropy and perplexity
    (`TokenLosses`); with `grad_norms` one backward pass too (`TrainingStep`: gradient norms, training-step
    memory). `names`: as `attribute`'s."""
    from inspector.api.measures import ids_loss, text_loss

    given = _ids(self, text, ids, "text")
    if not isinstance(grad_norms, bool):
        raise InputTypeError(f"grad_norms must be True or False, got {grad_norms!r:.40}")
    with refusals(names):
        losses, step = (text_loss(self.loaded, text, grad_norms) if given is None
                        else ids_loss(self.loaded, given, grad_norms))
    return losses if step is None else step


def kv_eval(self: Model, text: str | None = None, *, ids: Sequence[int] | None = None, policy: str,
            budget: int | None = None, sinks: int = 4, positions: str = "original",
            prefill: int | None = None, names: str = "keywords") -> dict[str, Any]:
    """A KV-cache policy against the full cache, teacher-forced on `text` or token `ids` (`inspector
    kv-eval`): KL, top-1 agreement, perplexity, bytes kept. `names`: as `attribute`'s."""
    from inspector.api.measures import kv_evaluation

    spec = kv_spec(policy, budget, sinks, positions, names)
    given = _ids(self, text, ids, "text")
    with refusals(names):
        return kv_evaluation(self.loaded, text, spec, None if prefill is None else PREFILL.parse(prefill), ids=given)


def quant(self: Model, prompt: str | None = None, *, ids: Sequence[int] | None = None, quant: str,
          kv_quant: str | None = None, chat: bool = False, system: str | None = None,
          max_new_tokens: int = 32, names: str = "keywords") -> FidelityRecord:
    """How far a quantized copy strays from this model, teacher-forced on its greedy tokens after `prompt`
    or token `ids` (`inspector quant`): quant "bf16" | "int8" | "int4[:GROUP]", kv_quant "int8";
    `summary()` is the CLI's JSON. `names`: as `attribute`'s."""
    from inspector.api.measures import fidelity
    from inspector.generation.request import MAX_NEW_TOKENS

    given = _ids(self, prompt, ids, "prompt", chat, system)
    with refusals(names):
        return fidelity(self.loaded, prompt, _text(quant, "quant"), kv_quant, chat=chat, system=system,
                        max_new_tokens=int(MAX_NEW_TOKENS.parse(max_new_tokens)), ids=given)


def beam_search(self: Model, prompt: str | None = None, *, ids: Sequence[int] | None = None, num_beams: int = 2,
                request: RunRequest | None = None, names: str = "keywords", **options: Any) -> BeamRecord:
    """Beam search (`inspector run --num-beams B`) after `prompt` or token `ids`: every hypothesis scored, the
    candidate tree per step. Takes `Model.prefill`'s keywords that beam search combines with (chat, system,
    max_new_tokens, length_penalty and the decoding processors), read into one `RunRequest`; or that
    `request` itself (what `Model.start` takes: `inspector run --num-beams` hands over its flags' one), with
    no prompt, ids or keywords beside it (its num_beams is the request's). The record carries the request
    (`rec.request`); `inspector.commands.decoding.beam_dict` gives the CLI's JSON. `names`: as `attribute`'s."""
    from inspector.api.measures import beam_record
    from inspector.generation.request import RunRequest

    if request is None:
        given = _ids(self, prompt, ids, "prompt", options.get("chat", False), options.get("system"))
        request = RunRequest.from_keywords(dict(options, num_beams=num_beams), prompt=prompt,
                                           ids=None if given is None else tuple(given), device=self.loaded.device)
    elif prompt is not None or ids is not None or options:
        raise InputError("beam_search takes a request or a prompt, ids and keywords, not both")
    else:
        given = _ids(self, request.prompt, request.ids, "prompt", request.chat, request.system)
    where = refusals(names)
    _, settings = request.check(names=names)
    if settings.num_beams < 2:
        raise InputError(f"{_named('num_beams', names)} must be at least 2 for a beam search, got {settings.num_beams}")
    with where:
        rec = beam_record(self.loaded, request.prompt, request.chat, request.system, settings, request.max_new_tokens,
                          ids=given)
    rec.request = request
    return rec


def _heads_args(names: str, **given: Any) -> SimpleNamespace:
    """`inspector heads`'s own values (probe_len, probes, seed, role, top_k) checked as its flags check them."""
    from inspector.analysis.head_findings import PROBE_LEN, PROBES, ROLES, TOP_K
    from inspector.validate import SEED

    bounds = {"probe_len": PROBE_LEN, "probes": PROBES, "seed": SEED, "top_k": TOP_K}
    out = {}
    for name, value in given.items():
        if name in bounds:
            out[name] = bounded(bounds[name], value, _named(name, names))
        elif not isinstance(value, str):
            raise InputError(f"{_named(name, names)} must be a string, got {shown(value)}")
        elif value not in ROLES:
            raise InputError(f"{_named(name, names)} must be one of {', '.join(ROLES)}, got {shown(value)}")
        else:
            out[name] = value
    return SimpleNamespace(**out)


def _atlas(self: Model, args: SimpleNamespace, names: str) -> HeadAtlas:
    """The atlas on the probe `inspector heads`'s parsed flags describe (kept per model and probe)."""
    from inspector.analysis import heads

    with refusals(names):
        probe = heads.model_probe(self.loaded, args.probe_len, args.probes, args.seed)
    return heads.atlas(self.loaded.model, probe)


def head_scores(self: Model, *, ids: Sequence[int] | Sequence[Sequence[int]] | None = None, probe_len: int = 48,
                probes: int = 8, seed: int = 0, names: str = "keywords") -> HeadAtlas:
    """Every head's previous-token, first-token, duplicate-token and induction scores (`inspector heads`) on
    `probes` sequences of `probe_len` random ordinary tokens (seed `seed`), each repeated once; kept per model
    and probe. `heads_json()` and `probe.to_json()` are the command's "heads" and "probe". With `ids` (one
    sequence or a list of sequences of one length, each prefix + s + s: a sequence repeated once after the
    same number of prefix tokens) the scores are those of the given ids (the probe's seed is then None).
    `names`: as `attribute`'s."""
    if ids is not None:
        from inspector.analysis import heads

        with refusals(names):
            return heads.score_probe(self.loaded.model, given_probe(self, ids))
    return _atlas(self, _heads_args(names, probe_len=probe_len, probes=probes, seed=seed), names)


def given_probe(self: Model, ids: Any) -> Any:
    """A head-atlas probe of given rows, each prefix + s + s (the repeat found in the first row)."""
    import numpy as np

    from inspector.analysis.head_findings import Probe

    if isinstance(ids, (str, bytes)):
        raise InputTypeError("ids must be token ids (a list of ints, or a list of such lists)")
    rows = list(ids.tolist() if hasattr(ids, "tolist") else ids)
    nested = bool(rows) and not isinstance(rows[0], numbers.Integral)
    rows = [token_ids(r, self.config.vocab_size) for r in (rows if nested else [rows])]
    T = len(rows[0])
    if any(len(r) != T for r in rows):
        raise InputError("every row of ids must have one length")
    split = next(((p, (T - p) // 2) for p in range(T - 3) if (T - p) % 2 == 0 and rows[0][p:p + (T - p) // 2]
                  == rows[0][p + (T - p) // 2:]), None)
    if split is None or any(r[split[0]:split[0] + split[1]] != r[split[0] + split[1]:] for r in rows):
        raise InputError("head_scores scores a sequence repeated once: each row of ids is prefix + s + s "
                         "(s at least 2 tokens), with the same prefix length in every row")
    p, n = split
    return Probe(n, len(rows), None, tuple(rows[0][:p]), np.asarray(rows, dtype=np.int64), self.config.vocab_size, 0)


def head_ablation(self: Model, *, role: str = "induction", top_k: int = 5, probe_len: int = 48, probes: int = 8,
                  seed: int = 0, names: str = "keywords") -> HeadAblation:
    """The probe's loss on its first and repeated copy with no head off, the `top_k` heads of `role` off and
    `top_k` random other heads off (`inspector heads --role --top-k`; `seed` draws the probe and the random
    heads); `to_json()` is the command's "ablation". `top_k` is refused before any forward (the atlas of
    `head_scores` is computed here, and kept). `names`: as `attribute`'s."""
    from inspector.analysis import heads_ablation

    refusals(names)  # names checked
    args = _heads_args(names, role=role, top_k=top_k, probe_len=probe_len, probes=probes, seed=seed)
    try:
        k = heads_ablation.check_k(self.loaded.config, args.top_k)  # refused before the forwards
    except InputError as exc:
        raise InputError(str(exc) if names == "flags" else str(exc).replace("top-k", "top_k")) from None
    return heads_ablation.ablation(self.loaded.model, _atlas(self, args, names), args.role, k, args.seed)
