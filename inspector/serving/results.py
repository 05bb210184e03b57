"""What a serving run records, as plain dataclasses (no torch): the scheduler's steps, the pool's block
table, a request timeline, the machine's peaks and the memory calculator's bars. `inspector.viz.serving`
draws figures from these alone.

- `Row`: one row of a step's batch (a request's prefill chunk or decode token) and the context it attends
  to beyond its new tokens.
- `StepRecord`: one engine step (one batched forward): its rows, blocks in use, admissions, preemptions,
  finishes, the token each row produced, wall time, and the forward's FLOPs and bytes moved as counted by
  `inspector.serving.roofline.forward_cost` (0 for a step with no forward).
- `BlockGrid`: for each pool block, the requests referencing it (empty: free; two or more: shared).
- `RequestTimeline`: a request's state at every engine step ("" before it arrived, then waiting, prefill,
  decode, preempted, finished).
- `Peaks`: the machine's measured matmul GFLOP/s and memory-read GB/s.
- `MemoryBar`: one bar of the memory calculator (weights and KV bytes of one model variant).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

STATES = ("waiting", "prefill", "decode", "preempted", "finished")  # timeline states, drawing order


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REFUSED = "refused"


@dataclass(frozen=True)
class Row:
    """One row of a step's batch: which sequence, prefill or decode, how many tokens it fed."""

    request_id: int
    kind: str  # "prefill" | "decode"
    num_tokens: int
    context: int = 0  # positions already cached for this sequence before the step (what it reads besides its own)


@dataclass(frozen=True)
class StepRecord:
    step: int
    rows: list[Row]
    blocks_used: int  # pool blocks held during the forward (before finished sequences free theirs)
    admitted: list[int]
    preempted: list[int]
    finished: list[int]
    new_tokens: dict[int, int]  # request_id -> the token this step produced
    elapsed_ms: float
    flops: int = 0  # of the forward (roofline.forward_cost)
    bytes_moved: int = 0  # weights read + KV read and written
    forward_ms: float = 0.0  # the forward alone (elapsed_ms also holds scheduling and sampling)

    @property
    def gflops_per_s(self) -> float:
        return self.flops / (self.forward_ms * 1e6) if self.forward_ms > 0 else 0.0

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / (self.forward_ms * 1e6) if self.forward_ms > 0 else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0

    @property
    def kind(self) -> str:
        """"prefill", "decode", "mixed" (both kinds of rows) or "idle"."""
        kinds = {r.kind for r in self.rows}
        return "idle" if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"


@dataclass(frozen=True)
class BlockGrid:
    block_size: int
    owners: tuple[tuple[int, ...], ...]  # per pool block, the sequence ids whose tables hold it

    @property
    def used(self) -> int:
        return sum(1 for o in self.owners if o)

    @property
    def shared(self) -> int:
        return sum(1 for o in self.owners if len(o) > 1)


@dataclass(frozen=True)
class RequestTimeline:
    request_id: int
    label: str  # short text for the axis, e.g. "#2 The capital…"
    states: tuple[str, ...]  # one per engine step: "" before arrival, else one of STATES
    generated: int = 0


@dataclass(frozen=True)
class Peaks:
    gflops_per_s: float  # best of a large square matmul
    gb_per_s: float  # best of a sum over a tensor much larger than the caches
    dtype: str
    key: str = ""  # machine | torch | threads it was measured under

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the compute roof meets the bandwidth roof."""
        return self.gflops_per_s / self.gb_per_s


@dataclass(frozen=True)
class MemoryBar:
    label: str  # e.g. "GQA (3 KV heads)" or "full MHA (9 KV heads)"
    weight_bytes: int
    kv_bytes: int
    fits_requests: int | None = None


@dataclass(frozen=True)
class ServingView:
    """Everything the Serving tab draws after a step."""

    steps: list[StepRecord]
    grid: BlockGrid
    timelines: list[RequestTimeline]
    peaks: Peaks | None = None
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigRun:
    """One serving configuration of a prefix-caching comparison (`inspector.serving.prefix_compare`): the
    same requests served with or without prefix caching and chunked prefill."""

    label: str
    prefix_caching: bool
    chunk: int | None  # prefill chunk in tokens; None: whole prompts
    ttft_ms: list[float]  # per request
    tpot_ms: list[float]  # per request that generated two tokens or more
    hit_rate: float  # full prompt blocks found cached / looked up
    blocks_shared: int  # most blocks referenced by two requests or more at once
    prompt_tokens_computed: int  # prompt positions the forwards computed (the rest came from the cache)
    steps: int
    wall_s: float
    same_outputs: bool  # every request's tokens equal the first configuration's
