"""The README's head atlas numbers are the default model's, measured again here (issue 44): how many heads the
map colours first-token, the five highest induction scores and their layers, and the repeated copy's loss with
every head, without the top 5 induction heads and without 5 random ones (the default probe: 8 sequences of 48
random tokens, seed 0, as `inspector heads` runs it)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_the_readmes_head_atlas_numbers_are_the_default_models():
    from inspector.analysis import heads, heads_ablation
    from inspector.analysis.head_findings import ROLES
    from inspector.models.loader import load_model

    text = _flat(README)
    sink = re.search(r"(\d+) of the default model's (\d+) heads are coloured first-token", text)
    top = re.search(r"the five highest induction scores of the default model, ([\d.]+) to ([\d.]+), are heads of "
                    r"layers (\d+) and (\d+)", text)
    losses = re.search(r"the repeated copy's loss is ([\d.]+) nats with every head, ([\d.]+) without the top 5 "
                       r"induction heads, ([\d.]+) without 5 random ones", text)
    assert sink and top and losses

    loaded = load_model(None)
    probe = heads.model_probe(loaded)  # the defaults: 48 x 8, seed 0
    atlas = heads.atlas(loaded.model, probe)
    best = atlas.strongest()
    assert int(sink.group(2)) == best.size
    assert int(sink.group(1)) == int((best == ROLES.index("first_token")).sum())

    five = atlas.top("induction", 5)
    assert {L for L, _, _ in five} == {int(top.group(3)), int(top.group(4))}
    assert float(top.group(1)) == pytest.approx(min(v for *_, v in five), abs=0.006)
    assert float(top.group(2)) == pytest.approx(max(v for *_, v in five), abs=0.006)

    rows = heads_ablation.ablation(loaded.model, atlas, "induction", 5, probe.seed).rows
    measured = [r.loss_repeat for r in rows]  # none, top 5, 5 random
    assert np.allclose([float(losses.group(i)) for i in (1, 2, 3)], measured, atol=0.006)
