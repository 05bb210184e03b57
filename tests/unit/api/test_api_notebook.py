"""docs/inspector_tour.ipynb runs top to bottom in a fresh kernel on the default model: no cell errors, and
every cell that draws a view shows a plotly figure. The notebook is committed without outputs (they
depend on the run: timings, the sampled text); this test is what executes it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "docs" / "inspector_tour.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


def test_committed_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_tour_runs_and_draws_every_figure():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel starts in the repository root, so it imports this checkout's `inspector`
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]["evalue"] if errors else ""
    drawing = [c for c in code if "figure(" in c.source]
    assert len(drawing) >= 7  # timing, residual, attention x2, KV cache, sampling, attribution
    for c in drawing:
        shown = [o for o in c.outputs if o.output_type in ("execute_result", "display_data") and PLOTLY in o.data]
        assert shown, f"no figure from: {c.source.splitlines()[0]}"
    text = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "True" in text and "bytes per token: True" in text  # the KV formula matched the cache's bytes
