"""The head atlas's four scores counted by hand from attention maps (the reference for the atlas tests)."""

from __future__ import annotations

import numpy as np

from inspector.analysis.head_findings import ROLES


def scores_by_hand(att: np.ndarray, n: int, p: int) -> dict[str, np.ndarray]:
    """The four scores from attention maps (B, H, T, T) with plain loops over the positions each averages."""
    B, H, T, _ = att.shape
    repeat = range(p + n, T)
    out = {r: np.zeros(H) for r in ROLES}
    for h in range(H):
        out["previous_token"][h] = np.mean([att[b, h, i, i - 1] for b in range(B) for i in range(1, T)])
        out["first_token"][h] = np.mean([att[b, h, i, 0] for b in range(B) for i in range(1, T)])
        out["duplicate_token"][h] = np.mean([att[b, h, i, i - n] for b in range(B) for i in repeat])
        out["induction"][h] = np.mean([att[b, h, i, i - n + 1] for b in range(B) for i in repeat])
    return out
