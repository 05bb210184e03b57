"""From `DecodingSettings` to the logits processors a run's levers carry, in the order they run.

`decoding_processors(settings, prompt_len, tokenizer, eos_ids)` gives the stages in the order `transformers`
runs its processors: logit bias (its sequence bias), repetition penalty, then the OpenAI presence and
frequency penalties, no-repeat n-gram, bad words, min new tokens, and last the grammar mask (so the mask
sees, and reports, what the penalties left). Only the stages the settings switch on are built: default
settings give an empty tuple. Text settings are tokenized here: each bad word is banned as the model's
tokenizer splits it, with and without a leading space (`transformers` asks the caller to pass both forms).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inspector.engine.penalties import (BadWords, FrequencyPenalty, LogitBias, MinNewTokens, NoRepeatNGram,
                                        PresencePenalty, RepetitionPenalty)
from inspector.engine.processors import LogitsProcessor
from inspector.errors import InputError
from inspector.generation.settings import DecodingSettings


def bad_word_ids(words: Sequence[str], tokenizer: Any) -> tuple[tuple[int, ...], ...]:
    """Each word's token ids, as written and after a space (deduplicated, in order)."""
    out: list[tuple[int, ...]] = []
    for w in words:
        for form in (w, " " + w.lstrip()):
            ids = tuple(tokenizer.encode(form))
            if ids and ids not in out:
                out.append(ids)
    return tuple(out)


def decoding_processors(settings: DecodingSettings, prompt_len: int, tokenizer: Any, eos_ids: Sequence[int],
                        vocab_size: int) -> tuple[LogitsProcessor, ...]:
    """The processors `settings` call for (see the module docstring); InputError on a bad setting."""
    settings.validate()
    s, eos = settings, tuple(sorted(eos_ids))
    out: list[LogitsProcessor] = []
    if s.logit_bias:
        bad = [t for t, _ in s.logit_bias if t >= vocab_size]
        if bad:
            raise InputError(f"logit-bias token id must be a whole number from 0 to {vocab_size - 1}, got {bad[0]}")
        out.append(LogitBias(s.logit_bias))
    if s.repetition_penalty != 1.0:
        out.append(RepetitionPenalty(s.repetition_penalty))
    if s.presence_penalty:
        out.append(PresencePenalty(s.presence_penalty, prompt_len))
    if s.frequency_penalty:
        out.append(FrequencyPenalty(s.frequency_penalty, prompt_len))
    if s.no_repeat_ngram_size:
        out.append(NoRepeatNGram(s.no_repeat_ngram_size))
    if s.bad_words:
        out.append(BadWords(bad_word_ids(s.bad_words, tokenizer), eos))
    if s.min_new_tokens:
        out.append(MinNewTokens(s.min_new_tokens, prompt_len, eos))
    if s.constraint is not None:
        from inspector.generation.constraints import GrammarMask

        kind, spec = s.constraint
        out.append(GrammarMask(kind, spec, tokenizer, prompt_len, eos))
    return tuple(out)
