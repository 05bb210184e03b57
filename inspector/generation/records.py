"""What generation leaves for the views: plain data (no torch) — why a generation ended, and a beam search.

`FinishReason` names every way a generation ends (decided by `inspector.generation.sequence.Sequence`, the
only place that decides it); its values are the strings records and trace files keep. `FINISH_LABELS` is
the one table of how the views say each: a short label (a status line) and a long one (after the text).

A `BeamRecord` holds every step's candidates (`BeamNode`: the beam it continued, its token, cumulative
log-probability, and whether it survived as a live beam, entered the finished hypotheses, or was dropped)
and the finished hypotheses, best first. The tree view draws nodes by step and links each to its parent;
the nodes of `hypotheses[0]` are the chosen output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


RUNNING, FINISHED, DROPPED = "running", "finished", "dropped"


@dataclass
class BeamNode:
    id: int
    parent: int  # the node this continues; -1: the prompt
    step: int  # index of the generated token (0 = the first)
    token: int
    piece: str
    logprob: float  # cumulative log-probability of the beam up to and including this token
    status: str  # RUNNING (a live beam next step), FINISHED (entered the finished hypotheses), DROPPED
    rank: int  # its place among this step's candidates (0 = best)


@dataclass
class BeamHypothesis:
    node: int  # its last node
    token_ids: list[int]  # generated tokens
    text: str
    logprob: float  # cumulative log-probability
    score: float  # logprob / generated_length ** length_penalty (what beams are ranked by)


@dataclass
class BeamRecord:
    num_beams: int
    length_penalty: float
    early_stopping: bool
    prompt_ids: list[int]
    steps: list[list[BeamNode]] = field(default_factory=list)  # the candidates of each step, best first
    hypotheses: list[BeamHypothesis] = field(default_factory=list)  # finished, best first
    finish: str = ""  # a `FinishReason` value of the best hypothesis

    def path(self, node: int) -> list[int]:
        """Node ids from the first step to `node`."""
        by_id = {n.id: n for nodes in self.steps for n in nodes}
        out = []
        while node >= 0:
            out.append(node)
            node = by_id[node].parent
        return out[::-1]
