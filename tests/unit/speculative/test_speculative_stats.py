"""Sampled speculative decoding keeps the full model's distribution: a statistical test of whole rounds.

A toy "full model" over a 3-token vocabulary gives p1 for the first token, P2[a] for the second after a and
P3[b] for the third after b; a drafter with its own, different distributions (q1, Q2[a], Q3[b]) proposes k = 2
tokens per round. Rounds of `inspector.speculative.verify.accept_drafts` (the code `SpeculativeDecoder.round`
calls) are played until three tokens are out, so every path is taken: a kept draft, the residual draw after
a rejection at either draft, the bonus token after two kept drafts, and the next round's first token. The
joint frequencies of (t1, t2, t3) over many seeded runs are held to p1(a) P2[a](b) P3[b](c) by a chi-square
test (p-value from the regularized upper incomplete gamma function). The same test, run on deliberately
wrong rules patched into the verifier (accept with min(1, q/p); draw a rejection's replacement from p or
from max(q - p, 0)), must fail: that is what shows the test can tell. A drafter without a distribution
(prompt lookup: q one-hot on a fixed proposal) is tested the same way.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.speculative import verify

V, K = 3, 2
P1 = torch.tensor([0.20, 0.50, 0.30])
P2 = torch.tensor([[0.60, 0.20, 0.20],
                   [0.20, 0.30, 0.50],
                   [0.30, 0.45, 0.25]])
P3 = torch.tensor([[0.25, 0.40, 0.35],
                   [0.50, 0.20, 0.30],
                   [0.20, 0.50, 0.30]])
Q1 = torch.tensor([0.60, 0.10, 0.30])  # the drafter over-proposes token 0
Q2 = torch.tensor([[0.10, 0.70, 0.20],
                   [0.60, 0.30, 0.10],
                   [0.60, 0.10, 0.30]])
Q3 = Q2.flip(0)  # the third position's rows, per previous token
UNIFORM = torch.full((V,), 1.0 / V)
ALPHA = 1e-3  # the correct rule fails this test with probability about 1e-3 (the fixed seeds decide once)
RUNS, WRONG_RUNS = 4_000, 1_000


def target_row(position: int, prev: int | None) -> torch.Tensor:
    """The full model's distribution of the token at `position` (1-based) after the token `prev`."""
    if position == 1:
        return P1
    return P2[prev] if position == 2 else P3[prev] if position == 3 else UNIFORM  # past 3: never emitted


def drafter_row(position: int, prev: int | None) -> torch.Tensor:
    """The drafter's distribution at `position`: its own, different from the full model's at every position."""
    if position == 1:
        return Q1
    return Q2[prev] if position == 2 else Q3[prev] if position == 3 else UNIFORM


def three_tokens(seed: int, lookup: bool) -> tuple[int, int, int]:
    """Rounds of k drafts until three tokens are emitted; `lookup`: fixed proposals with no distribution."""
    params = SamplingParams(temperature=1.0, seed=seed)
    draft_rng = random.Random(10_000_019 * (seed + 1))  # the drafter's own stream, apart from the verifier's
    out: list[int] = []
    while len(out) < 3:
        n = len(out)  # the round's first draft is the token at position n + 1
        drafts: list[int] = []
        for i in range(K):
            prev = drafts[-1] if drafts else (out[-1] if out else None)
            if lookup:
                drafts.append((n + i + 1) % V)  # a proposal with no distribution behind it
            else:
                drafts.append(draft_rng.choices(range(V), weights=drafter_row(n + i + 1, prev).tolist())[0])
        ctx = [out[-1] if out else None, *drafts]  # the token before each verified position
        p = torch.stack([target_row(n + i + 1, ctx[i]) for i in range(K + 1)])  # (k+1, V)
        q = None if lookup else torch.stack([drafter_row(n + i + 1, ctx[i]) for i in range(K)])  # (k, V)
        verdict = verify.accept_drafts(drafts, p, q, params, first_position=n + 1)
        out += [*drafts[:verdict.accepted], verdict.token]
    return out[0], out[1], out[2]


def expected() -> torch.Tensor:
    """p(t1, t2, t3) = p1(t1) P2[t1](t2) P3[t2](t3), (V, V, V) in float64."""
    return (P1.double()[:, None, None] * P2.double()[:, :, None] * P3.double()[None, :, :])


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square goodness of fit over all cells; its p-value with cells - 1 degrees of freedom."""
    n = counts.sum()
    e = probs.reshape(-1) * n
    assert float(e.min()) >= 5, "too few draws per cell for the chi-square approximation"
    stat = ((counts.reshape(-1) - e) ** 2 / e).sum()
    df = counts.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


def joint_counts(runs: int, lookup: bool = False) -> torch.Tensor:
    counts = torch.zeros(V, V, V, dtype=torch.float64)
    for seed in range(runs):
        counts[three_tokens(seed, lookup)] += 1
    return counts


def wrong_acceptance(x, p, q, generator):
    """Keeps a draft with probability min(1, q/p): the ratio upside down."""
    qx = 1.0 if q is None else float(q[x])
    ratio = qx / max(float(p[x]), 1e-12)
    if ratio >= 1.0 or float(torch.rand((), generator=generator)) < ratio:
        return True, None
    return False, verify.draw(verify.residual(p, verify.one_hot(x, p) if q is None else q), generator)


WRONG = {
    "acceptance min(1, q/p)": ("accept_token", wrong_acceptance),
    "replacement drawn from p": ("residual", lambda p, q: p),
    "replacement drawn from max(q - p, 0)": ("residual", lambda p, q: (q - p).clamp_min(0) / (q - p).clamp_min(0).sum()),
}


def test_the_p_value_is_the_chi_square_survival_function():
    """With 2 degrees of freedom the chi-square survival function is exp(-x / 2) exactly."""
    for x in (0.5, 3.0, 13.8):
        got = float(torch.special.gammaincc(torch.tensor(1.0, dtype=torch.float64), torch.tensor(x / 2, dtype=torch.float64)))
        assert math.isclose(got, math.exp(-x / 2), rel_tol=1e-9)


def test_the_toy_drafter_differs_from_the_target():
    """The test means something only when drafts are often rejected: q is far from p at each position."""
    assert 0.5 * float((Q1 - P1).abs().sum()) > 0.3
    assert all(0.5 * float((Q2[a] - P2[a]).abs().sum()) > 0.2 for a in range(V))
    assert all(0.5 * float((Q3[a] - P3[a]).abs().sum()) > 0.1 for a in range(V))


@pytest.mark.parametrize("lookup", [False, True], ids=["drafter-q", "prompt-lookup"])
def test_whole_rounds_follow_the_full_models_distribution(lookup):
    """The first three emitted tokens (kept drafts, corrections, bonus, next round) have the joint
    distribution of sampling the full model token by token: chi-square p-value above ALPHA."""
    counts = joint_counts(RUNS, lookup)
    assert chi_square_p_value(counts, expected()) > ALPHA


@pytest.mark.parametrize("lookup", [False, True], ids=["drafter-q", "prompt-lookup"])
@pytest.mark.parametrize("wrong", list(WRONG))
def test_a_wrong_rule_fails_the_same_test(monkeypatch, wrong, lookup):
    """The same statistic rejects each wrong rule decisively, with fewer runs."""
    name, fn = WRONG[wrong]
    monkeypatch.setattr(verify, name, fn)
    counts = joint_counts(WRONG_RUNS, lookup)
    assert chi_square_p_value(counts, expected()) < 1e-9
