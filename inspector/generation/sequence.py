"""A `Sequence`: one generation's state, owned in one place — its ids, where the next token goes, its KV
cache handle, its detokenizer and why it finished.

- `prompt_ids` then `generated_ids` are the sequence; `position` is where the next forward's first new
  token sits (the newest token is not in the cache yet while generation goes on).
- `cache` and `row`: the KV cache this sequence's keys and values live in (the caller's: the model never
  owns it) and its row there; `None` for a sequence whose cache is handed to each forward by its owner.
- `set_token(index, token)` puts a token at `generated_ids[index]` and drops what followed (index ==
  len appends: the usual step; smaller: a branch or a re-draw), keeps the text in step (incremental
  detokenization, rebuilt after a replacement) and decides `finish`, in this order: the token is a stop
  id (EOS), a stop string appeared in the text (the text is cut before it), `max_new_tokens` reached,
  the context window full.
- `FinishReason` (defined in `inspector.generation.finish`, plain data, so the views can name it) lists
  every way a generation ends; its values are the strings records and trace files keep, so
  `seq.finish == "eos"` holds. The reasons a token causes are decided here and nowhere else; an owner that
  ends a generation without a token sets one itself (the serving scheduler's REFUSED).
- `SequenceOwner`: what a session or a speculative decoder shows of its `seq` (ids, text, finish reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from inspector.generation.finish import FinishReason
from inspector.models.detokenize import Detokenizer


class Sequence:
    """One generation: ids, position, cache handle, text, finish reason (see the module docstring)."""

    def __init__(self, prompt_ids: Iterable[int], max_new_tokens: int, context: int, *,
                 stop_ids: Iterable[int] = (), tokenizer: Any = None, stop_strings: Iterable[str] = (),
                 cache: Any = None, row: int = 0) -> None:
        self.prompt_ids: list[int] = list(prompt_ids)
        self.max_new_tokens, self.context = max_new_tokens, context
        self.stop_ids = frozenset(stop_ids)
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.tokenizer = tokenizer
        self.cache, self.row = cache, row
        self.generated_ids: list[int] = []
        self.finish: FinishReason | None = None
        self._detok = Detokenizer(tokenizer) if tokenizer is not None else None
        self.text = ""

    @property
    def ids(self) -> list[int]:
        """Prompt and generated tokens, in order."""
        return self.prompt_ids + self.generated_ids

    @property
    def position(self) -> int:
        """Where the newest token sits: the next decode forward feeds it at this position."""
        return len(self.prompt_ids) + len(self.generated_ids) - 1

    def append(self, token: int) -> FinishReason | None:
        """The next generated token; returns the finish reason it caused, if any."""
        return self.set_token(len(self.generated_ids), token)

    def set_token(self, index: int, token: int) -> FinishReason | None:
        """`token` becomes generated_ids[index] and every later token is dropped (see the module docstring)."""
        if not 0 <= index <= len(self.generated_ids):
            raise IndexError(f"generated token {index} of {len(self.generated_ids)}")
        appended = index == len(self.generated_ids) and self.finish is None
        self.generated_ids[index:] = [token]
        if self._detok is not None:
            if not appended:  # a replaced token: rebuild the text from scratch
                self._detok = Detokenizer(self.tokenizer)
                for t in self.generated_ids[:-1]:
                    self._detok.add(t)
            self._detok.add(token)
        self.finish = self._finish_reason(token)
        if self._detok is not None:
            if self.finish is not None:
                self._detok.finish()
            self.text = self._detok.text
            if self.finish is FinishReason.STOP_STRING:
                self.text = self._cut_at_stop(self.text)
        return self.finish

    def restore(self, generated_ids: Iterable[int], finish: str | None, text: str) -> None:
        """Take a saved generation's tokens, finish reason and text as they were recorded."""
        self.generated_ids = list(generated_ids)
        self.finish = None if finish is None else FinishReason(finish)
        if self._detok is not None:
            self._detok = Detokenizer(self.tokenizer)
            for t in self.generated_ids:
                self._detok.add(t)
            if self.finish is not None:
                self._detok.finish()
        self.text = text

    def _cut_at_stop(self, text: str) -> str:
        cuts = [text.find(s) for s in self.stop_strings if s in text]
        return text[:min(cuts)] if cuts else text

    def _finish_reason(self, token: int) -> FinishReason | None:
        if token in self.stop_ids:
            return FinishReason.EOS
        if self.stop_strings and self._detok is not None and any(s in self._detok.text for s in self.stop_strings):
            return FinishReason.STOP_STRING
        if len(self.generated_ids) >= self.max_new_tokens:
            return FinishReason.LENGTH
        if len(self.prompt_ids) + len(self.generated_ids) >= self.context:
            return FinishReason.CONTEXT_FULL
        return None


class SequenceOwner:
    """For a class that runs one generation in `self.seq`: its ids, text and finish reason, read through."""

    seq: Sequence

    @property
    def prompt_ids(self) -> list[int]:
        return self.seq.prompt_ids

    @property
    def generated_ids(self) -> list[int]:
        """Sampled tokens, in order (the newest one is not in the cache yet)."""
        return self.seq.generated_ids

    @property
    def text(self) -> str:
        """The generated text, grown by incremental detokenization."""
        return self.seq.text

    @property
    def finished(self) -> FinishReason | None:
        """Why generation ended (a str enum: "eos", "max_tokens", ...), or None while it goes on."""
        return self.seq.finish
