"""The analyses of the CLI, as `Model` methods with the same results: each calls the function its command
calls after parsing its flags (`inspector.commands.<command>`), so `result.to_json()` (a dict for
`kv_eval`, `summary()` for `quant`) is what `inspector <command> --json` prints for the same input, timings
apart. Token arguments (`token`, `answer`, `wrong`) are one token's text or "#ID", as the flags take them,
or an int id. `inspector.figure(result)` draws a result with the page's lab builders.

Adding an analysis: one function here taking the `Model` first, calling the command's shared function,
then one line in `Model` (`name = analyses.name`). Head scores (`inspector.analysis.heads`, when it
lands) go here the same way, beside `attribute`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inspector.api.options import keyword_errors
from inspector.errors import InputError

if TYPE_CHECKING:
    from inspector.analysis.records import Attribution, PatchSweep, TokenLosses, TrainingStep
    from inspector.api.model import Model
    from inspector.generation.records import BeamRecord
    from inspector.quant.records import FidelityRecord


def _token(value: str | int | None, name: str) -> str | None:
    """A token argument as its flag takes it: text, or "#ID" for an int id."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return f"#{value}"
    raise InputError(f"{name} must be one token's text or its id (an int), got {type(value).__name__}")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    return value


def attribute(self: Model, prompt: str, *, chat: bool = False, system: str | None = None,
              token: str | int | None = None) -> Attribution:
    """Direct logit attribution of the next token (`inspector attribute`): its logit (the top-1, or `token`)
    split into the embedding, every head and every MLP."""
    from inspector.commands.attribute import attribution

    with keyword_errors():
        return attribution(self.loaded, _text(prompt, "prompt"), chat=chat, system=system,
                           token=_token(token, "token"))


def patch(self: Model, clean: str, corrupt: str, answer: str | int, wrong: str | int, *,
          point: str = "resid_pre") -> PatchSweep:
    """Activation patching over every layer x position (`inspector patch`): the logit difference recovered
    when `point` ("resid_pre" | "attn_out" | "mlp_out") of the clean run replaces the corrupted run's."""
    from inspector.commands.patch import patching

    with keyword_errors():
        return patching(self.loaded, _text(clean, "clean"), _text(corrupt, "corrupt"), _token(answer, "answer"),
                        _token(wrong, "wrong"), _text(point, "point"))


def loss(self: Model, text: str, *, grad_norms: bool = False) -> TokenLosses | TrainingStep:
    """`text` teacher-forced (`inspector loss`): per-token cross-entropy and perplexity (`TokenLosses`); with
    `grad_norms` one backward pass too (`TrainingStep`: gradient norms, training-step memory)."""
    from inspector.commands.loss import text_loss

    if not isinstance(grad_norms, bool):
        raise InputError(f"grad_norms must be True or False, got {grad_norms!r:.40}")
    with keyword_errors():
        losses, step = text_loss(self.loaded, _text(text, "text"), grad_norms)
    return losses if step is None else step


def kv_eval(self: Model, text: str, *, policy: str, budget: int | None = None, sinks: int = 4,
            positions: str = "original", prefill: int | None = None) -> dict[str, Any]:
    """A KV-cache policy against the full cache, teacher-forced on `text` (`inspector kv-eval`): KL, top-1
    agreement, perplexity, bytes kept."""
    from inspector.commands.kv_eval import BUDGET, PREFILL, SINKS, kv_evaluation
    from inspector.quant.kv_eval import CacheSpec

    if positions not in ("original", "contiguous"):
        raise InputError(f"positions must be one of original, contiguous, got {positions!r:.40}")
    spec = CacheSpec(_text(policy, "policy"), None if budget is None else BUDGET.parse(budget), SINKS.parse(sinks),
                     positions == "contiguous")
    with keyword_errors():
        spec.check()
        return kv_evaluation(self.loaded, _text(text, "text"), spec, None if prefill is None else PREFILL.parse(prefill))


def quant(self: Model, prompt: str, *, quant: str, kv_quant: str | None = None, chat: bool = False,
          system: str | None = None, max_new_tokens: int = 32) -> FidelityRecord:
    """How far a quantized copy strays from this model, teacher-forced on its greedy tokens (`inspector
    quant`): quant "bf16" | "int8" | "int4[:GROUP]", kv_quant "int8"; `summary()` is the CLI's JSON."""
    from inspector.commands.flags import MAX_NEW_TOKENS
    from inspector.commands.quant import fidelity

    with keyword_errors():
        return fidelity(self.loaded, _text(prompt, "prompt"), _text(quant, "quant"), kv_quant, chat=chat,
                        system=system, max_new_tokens=int(MAX_NEW_TOKENS.parse(max_new_tokens)))


def beam_search(self: Model, prompt: str, *, num_beams: int = 2, **options: Any) -> BeamRecord:
    """Beam search (`inspector run --num-beams B`): every hypothesis scored, the candidate tree per step.
    Takes `Model.prefill`'s keywords that beam search combines with (chat, system, max_new_tokens,
    length_penalty and the decoding processors); `inspector.commands.decoding.beam_dict` gives the CLI's JSON."""
    from inspector.api.options import RUN_FLAGS
    from inspector.commands.decoding import beam_record
    from inspector.commands.run import check_args

    args = RUN_FLAGS.namespace(dict(options, num_beams=num_beams), prompt=_text(prompt, "prompt"), save_trace=None,
                               json=False, model=None, device=self.loaded.device, dtype=None, attention=None)
    with keyword_errors():
        _, settings = check_args(args)
        if settings.num_beams < 2:
            raise InputError(f"num_beams must be at least 2 for a beam search, got {settings.num_beams}")
        return beam_record(self.loaded, prompt, args.chat, args.system, settings, args.max_new_tokens)
