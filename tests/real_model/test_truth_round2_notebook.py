"""The notebook's numbers are the run's (issue 44): its intervention cell prints the top head's direct part
beside the total effect of zeroing it, and its sampling cell how many tokens top-p kept; each is checked
here against the same model run again through the API, not against a typed value.

The notebook's own cells are executed in this process (the model load, the prompt, the sampled run, its
sampling stages, the attribution and the ablation), picked by what they do, so cells added later elsewhere
in the notebook do not change what runs here."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "inspector_tour.ipynb"
# the cells this test runs, in notebook order: each named by a line it holds
NEEDED = ("inspector.load()", "prompt = ", "temperature=0.7", "run.step(", "run.sample()", "model.attribute(",
          "ablate_head=spec")


def _cells():
    import nbformat

    return nbformat.read(NOTEBOOK, as_version=4).cells


def _run_cells() -> tuple[dict, str]:
    """Execute the needed code cells in order; (their namespace, what they printed)."""
    code = [c.source for c in _cells() if c.cell_type == "code" and any(m in c.source for m in NEEDED)]
    assert len(code) == len(NEEDED), "a cell this test runs was not found"
    ns: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for src in code:
            exec(compile(src, str(NOTEBOOK), "exec"), ns)  # noqa: S102 (the repository's own notebook)
    return ns, out.getvalue()


def test_the_intervention_section_says_direct_part_and_total_effect_apart():
    section = next(c.source for c in _cells() if c.cell_type == "markdown" and "## 8. One intervention" in c.source)
    assert "lowers that logit" not in section  # the top head by size may push against the token
    assert "direct part" in section and "total effect" in section and "either sign" in section


def test_the_top_p_sentence_says_at_least():
    section = next(c.source for c in _cells() if c.cell_type == "markdown" and "## 7. The sampling stages" in c.source)
    assert "*at least* 90%" in section and "up to 90%" not in section


@pytest.mark.slow
def test_the_notebooks_printed_numbers_are_the_runs():

    ns, printed = _run_cells()
    line = re.search(r"head (\d+\.\d+), logit of .*: direct part ([+-]\d+\.\d\d) .*zeroing the head: "
                     r"(-?\d+\.\d\d) -> (-?\d+\.\d\d), total effect ([+-]\d+\.\d\d)", printed)
    assert line, printed
    spec, direct, before, after, total = line.group(1), *(float(line.group(i)) for i in range(2, 6))

    # the same analysis and ablation again, through the API, in this process
    model, prompt = ns["model"], ns["prompt"]
    attr = model.attribute(prompt, chat=True)
    name, part = next((n, v) for n, v in attr.ranked() if n.startswith("head"))
    assert name == f"head {spec}" and direct == pytest.approx(part, abs=0.006)
    assert all(abs(v) <= abs(part) for n, v in attr.ranked() if n.startswith("head"))  # the largest by size
    t = attr.token_id
    plain = model.prefill(prompt, chat=True, max_new_tokens=1)
    off = model.prefill(prompt, chat=True, max_new_tokens=1, ablate_head=spec)
    assert before == pytest.approx(float(plain.logits(0)[t]), abs=0.006)
    assert after == pytest.approx(float(off.logits(0)[t]), abs=0.006)
    assert total == pytest.approx(after - before, abs=0.011)

    # top-p: the fewest most likely tokens whose probabilities reach at least p, at the sampled step
    run, s = ns["run"], ns["s"]
    kept = int(re.search(r"top-p [\d.]+ kept (\d+) token", printed).group(1))
    logits = run.logits(len(run.records) - 1).astype(np.float64) / s.params.temperature
    p = np.exp(logits - logits.max())
    p = np.sort(p / p.sum())[::-1]
    fewest = int(np.searchsorted(np.cumsum(p), s.params.top_p)) + 1  # first index whose cumulative sum >= p
    assert kept == fewest
    assert np.cumsum(p)[kept - 1] >= s.params.top_p and (kept == 1 or np.cumsum(p)[kept - 2] < s.params.top_p)
