"""The head atlas through the Python API on a tiny model: `Model.head_scores` and `Model.head_ablation` give what
`inspector heads --json` prints for the same flags (timings apart), `inspector.figure` draws them with the
page's builders, and bad keywords are one line naming the keyword."""

from __future__ import annotations

import json

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

import inspector
from inspector.commands.cli import main
from inspector.viz import heads as vh
from tests.support.json_compare import same, untimed


@pytest.fixture(scope="module")
def model(tiny_llama_dir):  # noqa: F811
    return inspector.load(tiny_llama_dir)


def test_head_scores_and_ablation_equal_the_cli_json(model, tiny_llama_dir, capsys):  # noqa: F811
    assert main(["heads", "--model", str(tiny_llama_dir), "--probe-len", "7", "--probes", "3", "--seed", "2",
                 "--role", "duplicate_token", "--top-k", "2", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    atlas = model.head_scores(probe_len=7, probes=3, seed=2)
    ablation = model.head_ablation(role="duplicate_token", top_k=2, probe_len=7, probes=3, seed=2)
    assert same(atlas.heads_json(), cli["heads"])
    assert same({**atlas.probe.to_json(), "rows_per_forward": atlas.batched_rows}, untimed(cli["probe"]))
    assert same(untimed(ablation.to_json()), untimed(cli["ablation"]))
    assert model.head_scores(probe_len=7, probes=3, seed=2) is atlas  # kept per model and probe
    default = model.head_scores()
    assert (default.probe.n, default.probe.count, default.probe.seed) == (48, 8, 0)  # the CLI's defaults


def test_figure_draws_the_atlas_and_the_ablation_as_the_page_does(model):
    atlas = model.head_scores(probe_len=7, probes=3, seed=2)
    ablation = model.head_ablation(top_k=2, probe_len=7, probes=3, seed=2)
    assert inspector.figure(atlas).to_plotly_json() == vh.atlas_figure(atlas).to_plotly_json()
    assert inspector.figure(ablation).to_plotly_json() == vh.ablation_figure(ablation).to_plotly_json()


@pytest.mark.parametrize("call, says", [
    (lambda m: m.head_scores(probes=0), "probes must be a whole number >= 1, got 0"),
    (lambda m: m.head_scores(probe_len=1), "probe_len must be a whole number >= 2, got 1"),
    (lambda m: m.head_scores(probe_len=129), "the context window is 256: use a probe length of at most 128"),
    (lambda m: m.head_ablation(top_k=9), "top_k must be a whole number from 1 to 8"),
    (lambda m: m.head_ablation(top_k=5), "too few for a random set of 5: use a top_k of at most 4"),
    (lambda m: m.head_ablation(role="copying"), "role must be one of previous_token, first_token"),
])
def test_bad_keywords_are_one_line(model, call, says):
    with pytest.raises(inspector.InputError) as info:
        call(model)
    assert says in str(info.value) and "\n" not in str(info.value)
