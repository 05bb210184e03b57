"""Why a generation ended, as plain data the views read (no torch).

`FinishReason` names every way a generation ends (decided by `inspector.generation.sequence.Sequence`, the
only place that decides it); its values are the strings records and trace files keep. `FINISH_LABELS` is
the one table of how the views say each: a short label (a status line) and a long one (after the text).
"""

from __future__ import annotations

from enum import Enum


class FinishReason(str, Enum):
    EOS = "eos"  # a stop token was drawn
    LENGTH = "max_tokens"  # max new tokens reached
    STOP_STRING = "stop_string"  # a stop string appeared in the text
    CONTEXT_FULL = "context_full"  # the context window is full
    CANCELLED = "cancelled"  # the user stopped it
    REFUSED = "refused"  # it could never run (e.g. longer than the cache or context can hold)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


FINISH_LABELS: dict[FinishReason, tuple[str, str]] = {  # reason -> (short, long)
    FinishReason.EOS: ("EOS", "end of sequence (EOS)"),
    FinishReason.LENGTH: ("max tokens", "max new tokens reached"),
    FinishReason.STOP_STRING: ("stop string", "a stop string appeared (the text is cut before it)"),
    FinishReason.CONTEXT_FULL: ("context full", "context window full"),
    FinishReason.CANCELLED: ("cancelled", "cancelled"),
    FinishReason.REFUSED: ("refused", "refused: it could not fit"),
}


def finish_label(finished: str | None, long: bool = False) -> str:
    """How the views say a finish reason (`FINISH_LABELS`); "" for None, an unknown string as it is."""
    if not finished:
        return ""
    try:
        return FINISH_LABELS[FinishReason(finished)][1 if long else 0]
    except ValueError:
        return str(finished)
