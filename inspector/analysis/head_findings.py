"""What the head atlas returns to the UI, the CLI and the viz: numpy arrays and dataclasses, no torch.

`Probe`: K sequences of n uniformly random ordinary token ids, each repeated once, after the prefix a
plain prompt starts with (the BOS of a tokenizer that adds one, else nothing): row b is
prefix + s_b + s_b. `HeadAtlas`: the four scores of every head on a probe (`ROLES`, each a (layers,
heads) array; definitions in `inspector.analysis.heads`). `PromptScores`: the two scores defined on any
text (previous-token, first-token) on one run's tokens. `HeadPattern`: one head's attention pattern on
some tokens. `HeadAblation`: the probe's loss on its first and its repeated copy with no head ablated, with
the top-k heads of a role ablated and with k random other heads ablated. `RunAblation`: a session's newest
step as it was beside the same step of the run made again with heads ablated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inspector.validate import Bound

PROBE_LEN = Bound("probe-len", True, 2)  # `inspector heads`'s numbers
PROBES = Bound("probes", True, 1)
TOP_K = Bound("top-k", True, 1)
ROLES = ("previous_token", "first_token", "duplicate_token", "induction")
ROLE_NAMES = {"previous_token": "previous-token", "first_token": "first-token (attention sink)",
              "duplicate_token": "duplicate-token", "induction": "induction"}


@dataclass(frozen=True)
class Probe:
    n: int  # random tokens per copy
    count: int  # sequences (K)
    seed: int
    prefix: tuple[int, ...]  # ids before each sequence's first copy (a BOS, or none)
    ids: np.ndarray  # (K, len(prefix) + 2n) int64: prefix + s + s per row
    vocab_size: int
    excluded: int  # token ids never drawn (special / control tokens)

    @property
    def length(self) -> int:
        return len(self.prefix) + 2 * self.n

    @property
    def key(self) -> tuple:
        """What makes two probes the same (the atlas cache's key with the model)."""
        return (self.n, self.count, self.seed, self.prefix, self.vocab_size, self.excluded)

    def to_json(self) -> dict:
        return {"n": self.n, "sequences": self.count, "seed": self.seed, "prefix_ids": list(self.prefix),
                "length": self.length, "vocab_size": self.vocab_size, "excluded_ids": self.excluded}


@dataclass
class HeadAtlas:
    probe: Probe
    scores: dict[str, np.ndarray]  # role -> (layers, heads) float64 in [0, 1]
    seconds: float  # the forward(s) and the scoring, measured when computed
    batched_rows: int  # probe sequences per forward

    @property
    def shape(self) -> tuple[int, int]:
        return self.scores[ROLES[0]].shape  # type: ignore[return-value]

    def strongest(self) -> np.ndarray:
        """(layers, heads) index into ROLES of each head's largest score."""
        return np.stack([self.scores[r] for r in ROLES]).argmax(axis=0)

    def top(self, role: str, k: int) -> list[tuple[int, int, float]]:
        """The k heads with the largest `role` score: (layer, head, score), largest first (ties: lower layer, head)."""
        s = self.scores[role]
        order = sorted(((-float(s[L, h]), L, h) for L in range(s.shape[0]) for h in range(s.shape[1])))
        return [(L, h, -v) for v, L, h in order[:k]]

    def heads_json(self) -> list[dict]:
        L, H = self.shape
        return [{"layer": i, "head": h, **{r: float(self.scores[r][i, h]) for r in ROLES}}
                for i in range(L) for h in range(H)]


@dataclass
class PromptScores:
    """Previous-token and first-token scores of every head on one run's tokens (queries 1..T-1)."""
    tokens: int
    scores: dict[str, np.ndarray]  # "previous_token", "first_token" -> (layers, heads)


@dataclass
class HeadPattern:
    layer: int
    head: int
    pattern: np.ndarray  # (T, T) float32, row = query, 0 above the diagonal
    pieces: list[str]  # one per position
    what: str  # "probe sequence 0 (n = 48, repeated from position 48)", "this run (13 tokens)"
    repeat_from: int | None = None  # on a probe: the first position of the repeated copy


@dataclass
class AblationRow:
    label: str  # "none", "top 5 induction heads", "5 random heads"
    heads: list[tuple[int, int]]
    loss_first: float  # mean nats predicting the first copy's tokens 2..n
    loss_repeat: float  # mean nats predicting the repeated copy's tokens 2..n


@dataclass
class HeadAblation:
    role: str
    k: int
    seed: int  # draws the random heads
    rows: list[AblationRow]  # none, top-k of the role, k random heads not in the top-k
    seconds: float

    def to_json(self) -> dict:
        return {"role": self.role, "k": self.k, "random_seed": self.seed, "seconds": self.seconds,
                "rows": [{"label": r.label, "heads": [list(h) for h in r.heads], "loss_first_copy": r.loss_first,
                          "loss_repeated_copy": r.loss_repeat} for r in self.rows]}


@dataclass
class RunAblation:
    label: str  # "heads 18.6, 17.3 off"
    heads: list[tuple[int, int]]
    step_before: int  # the newest step of the run as it was
    step_after: int  # the newest step of the run made again (fewer steps when it finished sooner)
    top_before: list[tuple[str, float]]  # (piece, probability of the raw logits), most likely first
    top_after: list[tuple[str, float]]
    token_piece: str  # what the run as it was drew at its newest step
    token_prob_before: float
    token_prob_after: float  # that token's probability at the ablated run's newest step
    first_diverging: int | None  # the first step whose drawn token differs (None: the same as far as both go)
    generated_after: list[str] = field(default_factory=list)  # the ablated run's generated pieces

    @property
    def same_context(self) -> bool:
        """Both newest steps predict from the same tokens (no earlier step drew another token)."""
        return self.step_before == self.step_after and (self.first_diverging is None
                                                         or self.first_diverging >= self.step_after)
