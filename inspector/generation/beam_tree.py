"""A beam search's candidate tree, as plain data the tree view reads (no torch).

A `BeamRecord` holds every step's candidates (`BeamNode`: the beam it continued, its token, cumulative
log-probability, and whether it survived as a live beam, entered the finished hypotheses, or was dropped)
and the finished hypotheses, best first. The tree view draws nodes by step and links each to its parent;
the nodes of `hypotheses[0]` are the chosen output. `inspector.generation.beam` fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    request: Any = None  # the `RunRequest` it ran (`Model.beam_search`), None when searched without one

    def path(self, node: int) -> list[int]:
        """Node ids from the first step to `node`."""
        by_id = {n.id: n for nodes in self.steps for n in nodes}
        out = []
        while node >= 0:
            out.append(node)
            node = by_id[node].parent
        return out[::-1]
