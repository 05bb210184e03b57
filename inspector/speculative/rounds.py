"""What a speculative-decoding run records, as plain dataclasses (no torch): the viz layer draws these.

One `RoundRecord` per round: the drafted tokens with the drafter's probability q and the full model's p of
each, how many the verifier kept, the token it added (the correction at the first rejection, or the bonus
when every draft was kept), and the target KV cache's length before the round, after the verify forward
wrote its k+1 entries, and after the rollback. `SpecStats` sums the rounds of a run; `PlainTiming` is a
plain decode of the same prompt and length, timed in the same process, for the speedup.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftToken:
    id: int
    piece: str
    q: float  # the drafter's probability of this token (1.0 for a drafter without a distribution)
    p: float  # the full model's probability of it at this position (raw softmax, shown beside q)
    accepted: bool


@dataclass
class RoundRecord:
    index: int  # 0-based round number
    start_pos: int  # position of the token fed first (the last token generated before the round)
    fed_id: int  # that token
    fed_piece: str
    drafts: list[DraftToken]  # in order; the verifier keeps a prefix of them
    accepted: int  # how many drafts were kept
    next_id: int | None  # the token the verifier adds; None when generation ended inside the drafts
    next_piece: str
    next_p: float  # the full model's raw probability of next_id
    next_kind: str  # "corrected" (first rejection replaced), "bonus" (all k kept), "plain" (no drafts), "none"
    emitted: list[int]  # every token this round appended to the output (kept drafts + next, cut at the end)
    kv_before: int  # target cache length before the verify forward
    kv_written: int  # after it wrote k+1 entries (kv_before + k + 1)
    kv_after: int  # after the rollback past the rejected positions
    draft_ms: float
    verify_ms: float

    @property
    def drafted(self) -> int:
        return len(self.drafts)


@dataclass
class PlainTiming:
    """A plain greedy decode of the same prompt and length: tokens after the prefill and their wall time."""

    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class SpecStats:
    """Running totals of a speculative run (the rounds after the prefill)."""

    drafter: str
    draft_len: int
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0  # verify forwards (one per round)
    tokens: int = 0  # tokens the rounds appended
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    plain: PlainTiming | None = field(default=None)

    def add(self, r: RoundRecord) -> None:
        self.rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.target_forwards += 1
        self.tokens += len(r.emitted)
        self.draft_ms += r.draft_ms
        self.verify_ms += r.verify_ms

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def seconds(self) -> float:
        return (self.draft_ms + self.verify_ms) / 1e3

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def draft_share(self) -> float:
        """Drafting's share of the rounds' time (the draft cost)."""
        total = self.draft_ms + self.verify_ms
        return self.draft_ms / total if total > 0 else 0.0

    @property
    def speedup(self) -> float | None:
        """Tokens/s over the plain decode's, when one was timed."""
        if self.plain is None or self.plain.tokens_per_s <= 0 or self.tokens_per_s <= 0:
            return None
        return self.tokens_per_s / self.plain.tokens_per_s
