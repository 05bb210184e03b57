"""The analyses' computations behind the `Model` methods (`inspector.api.analyses`), which the CLI's commands
(`inspector attribute`, `patch`, `loss`, `kv-eval`, `quant`, `run --num-beams`) call: attribution, patching,
text_loss / ids_loss, kv_evaluation, fidelity, beam_record, and `token_id` (a token argument: one token's
text or "#ID"). Only `inspector.api.analyses` calls them. Their refusals name the flags (`--token`); a method
turns them into the keywords' names unless the CLI asks for flags (`analyses.refusals`). Each takes a loaded
model (`inspector.models.loader.LoadedModel`), and token ids given instead of the text where a method takes
`ids=`.
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError
from inspector.generation.settings import DecodingSettings
from inspector.validate import Bound

POINTS = ("resid_pre", "attn_out", "mlp_out")  # where `patching` patches
PREFILL = Bound("prefill", True, 1, note="(and below the text's tokens)")  # kv-eval's first forward


def token_id(text: str, tokenizer: Any, flag: str) -> int:
    """The one token `text` encodes to, or the id written as "#ID"; InputError otherwise."""
    vocab = tokenizer.vocab_size if hasattr(tokenizer, "vocab_size") else None
    if text.startswith("#") and text[1:].isdigit():
        t = int(text[1:])
        if vocab is not None and not 0 <= t < vocab:
            raise InputError(f"{flag} {text}: token ids are 0 to {vocab - 1}")
        return t
    if not text:
        raise InputError(f"{flag} is empty: give one token's text (e.g. ' Paris') or its id as #ID")
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise InputError(f"{flag} {text!r} is {len(ids)} tokens {tokenizer.pieces(ids)}: give one token's text "
                         "(a word's token usually starts with a space) or its id as #ID")
    return ids[0]


def attribution(loaded: Any, prompt: str | None, *, chat: bool = False, system: str | None = None,
                token: str | None = None, ids: list[int] | None = None) -> Any:
    """The `Attribution` this command prints for `prompt` on `loaded` (the Python API's too; `ids`: token ids
    given instead of the prompt); `token` as --token takes it (one token's text or #ID; None: the top-1)."""
    from inspector.analysis.attribution import attribute

    if ids is None:
        check_prompt(prompt)
    tok = loaded.tokenizer
    ids = tok.prompt_ids(prompt, chat, system) if ids is None else list(ids)
    chosen = None if token is None else token_id(token, tok, "--token")
    return attribute(loaded.model, ids, chosen, piece=tok.piece)


def patching(loaded: Any, clean: str | None, corrupt: str | None, answer: str, wrong: str, point: str = "resid_pre",
             ids: tuple[list[int], list[int]] | None = None) -> Any:
    """The `PatchSweep` this command prints (the Python API's too; `ids`: the clean and corrupted token ids
    given instead of the texts); answer and wrong as --answer / --wrong take them (one token's text or #ID)."""
    from inspector.analysis.patching import sweep

    if ids is None:
        check_patch_texts(clean, corrupt)
    if point not in POINTS:
        raise InputError(f"--point must be one of {', '.join(POINTS)}, got {point!r}")
    tok = loaded.tokenizer
    clean_ids, corrupt_ids = (tok.encode(clean), tok.encode(corrupt)) if ids is None else map(list, ids)
    if len(clean_ids) != len(corrupt_ids):
        raise InputError(f"--clean is {len(clean_ids)} tokens and --corrupt {len(corrupt_ids)}: patching needs "
                         "prompts of the same token length")
    answer_id, wrong_id = token_id(answer, tok, "--answer"), token_id(wrong, tok, "--wrong")
    return sweep(loaded.model, clean_ids, corrupt_ids, answer_id, wrong_id, point,
                 pieces=(tok.pieces(clean_ids), tok.pieces(corrupt_ids)))


def check_prompt(prompt: str) -> None:
    """InputError when a prompt has no text (no model needed)."""
    if not prompt.strip():
        raise InputError("prompt is empty")


def check_patch_texts(clean: str, corrupt: str) -> None:
    """InputError unless both of patching's prompts have text (no model needed)."""
    if not clean.strip() or not corrupt.strip():
        raise InputError("--clean and --corrupt need text: both prompts are required")


def text_loss(loaded: Any, text: str, grad_norms: bool = False) -> tuple[Any, Any]:
    """(TokenLosses, TrainingStep with --grad-norms else None) of `text` teacher-forced through `loaded`: what
    this command prints (the Python API's too)."""
    from inspector.errors import InputError

    if not text.strip():
        raise InputError("the text is empty: give a text to teacher-force")
    return ids_loss(loaded, loaded.tokenizer.prompt_ids(text, False), grad_norms)


def ids_loss(loaded: Any, ids: list[int], grad_norms: bool = False) -> tuple[Any, Any]:
    """`text_loss` of token ids given as they are (the Python API's `loss(ids=...)`)."""
    from inspector.analysis.training import check_text, token_losses, training_step

    check_text(ids, loaded.config.max_position_embeddings)
    pieces = loaded.tokenizer.pieces(ids)
    if grad_norms:
        step = training_step(loaded.model, ids, pieces)
        return step.losses, step
    return token_losses(loaded.model, ids, pieces)[0], None


def kv_evaluation(loaded: Any, text: str | None, spec: Any, prefill: int | None = None,
                  ids: list[int] | None = None) -> dict[str, Any]:
    """The object `--json` prints for `text` under the checked `CacheSpec` `spec` on `loaded` (the Python
    API's too; `ids`: token ids given instead of the text); `prefill` as --prefill (None: half the tokens)."""
    from inspector.quant.kv_eval import evaluate

    ids = loaded.tokenizer.prompt_ids(text, False) if ids is None else list(ids)
    context = loaded.config.max_position_embeddings
    if len(ids) > context:
        raise InputError(f"the text is {len(ids)} tokens; the model's context window is {context} tokens")
    if len(ids) < 2:
        raise InputError(f"the text is {len(ids)} token: kv-eval needs at least 2 tokens")
    prefill = len(ids) // 2 if prefill is None else prefill
    if prefill >= len(ids):
        raise InputError(f"prefill must be a whole number from 1 to {len(ids) - 1} (the text has {len(ids)} tokens)")
    return evaluate(loaded.model, ids, spec, prefill)[0]


def fidelity(loaded: Any, prompt: str | None, quant: str, kv_quant: str | None = None, *, chat: bool = False,
             system: str | None = None, max_new_tokens: int = 32, ids: list[int] | None = None) -> Any:
    """The `FidelityRecord` this command prints for `prompt` on `loaded` (the Python API's too; `ids`: token
    ids given instead of the prompt)."""
    from inspector.quant.lab import QuantLab
    from inspector.quant.schemes import check_shapes, parse_kv, parse_scheme

    scheme, kv = parse_scheme(quant), parse_kv(kv_quant)
    if ids is None:
        check_prompt(prompt)
    check_shapes(scheme, loaded.config)
    ids = loaded.tokenizer.prompt_ids(prompt, chat, system) if ids is None else list(ids)
    if len(ids) + max_new_tokens > loaded.config.max_position_embeddings:
        raise InputError(f"prompt plus --max-new-tokens exceed the context window "
                         f"({loaded.config.max_position_embeddings} tokens)")
    return QuantLab(loaded).compare(ids, max_new_tokens, scheme.name, kv)


def beam_record(loaded: Any, prompt: str | None, chat: bool, system: str | None, settings: DecodingSettings,
                max_new_tokens: int, ids: list[int] | None = None) -> Any:
    """The `BeamRecord` of `run --num-beams` (the Python API's `Model.beam_search` and the page's Beams view
    search the same way: `inspector.session.beams.search`); `ids`: token ids given instead of the prompt."""
    from inspector.session.beams import search

    ids = loaded.tokenizer.prompt_ids(prompt, chat, system) if ids is None else list(ids)
    return search(loaded, ids, settings, max_new_tokens)
