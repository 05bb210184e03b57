"""The chain waterfall and table from a real draw, and the beam tree from a real search (tiny model)."""

from __future__ import annotations

import pytest

from inspector.engine.config import SamplingParams
from inspector.generation.settings import DecodingSettings
from inspector.viz.stages import chain_table_html, chain_waterfall
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def penalised(tiny_loaded):  # noqa: F811
    from inspector.session.session import Session

    s = Session(tiny_loaded)
    s.set_decoding(DecodingSettings(repetition_penalty=1.5, bad_words=("the",)))
    params = SamplingParams(temperature=0.8, top_k=3, seed=4)
    s.prefill("the cat and the dog", params, max_new_tokens=6)
    s.step(params)
    return s.records[-1].sample


def test_waterfall_has_a_column_per_stage_and_the_chosen_line(penalised):
    fig = chain_waterfall(penalised).to_dict()
    cols = fig["layout"]["xaxis"]["ticktext"]
    assert cols == ["raw", "repetition penalty", "bad words", "temperature", "top-k", "top-p", "min-p", "final"]
    chosen = [t for t in fig["data"] if t["line"]["width"] == 4]
    assert len(chosen) == 1 and str(penalised.token_id) in chosen[0]["name"]
    top_k = cols.index("top-k")
    assert sum(t["y"][top_k] > 0 for t in fig["data"]) <= 3  # top-k 3 keeps at most 3 of the candidates
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert any("removed" in n for n in notes) and any("moved" in n for n in notes)


def test_table_names_each_stage_with_its_effect(penalised):
    html = chain_table_html(penalised)
    for name in penalised.stages:
        assert f'data-stage="{name}"' in html
    by = {st.name: st for st in penalised.stage_stats}
    assert by["top-k"].allowed == 3 and by["bad words"].removed >= 1 and by["repetition penalty"].moved >= 3
    assert by["temperature"].moved == by["temperature"].allowed  # temperature rescales every logit


def test_beam_tree_grows_and_highlights_the_best(tiny_loaded):  # noqa: F811
    from inspector.generation.beam import beam_search
    from inspector.viz.beams import beam_table_html, beam_tree

    tok = tiny_loaded.tokenizer
    rec = beam_search(tiny_loaded.model, tok.encode("Hello there"), 3, 5, eos_ids=sorted(tiny_loaded.stop_ids),
                      piece=tok.piece, decode=tok.decode)
    full = beam_tree(rec).to_dict()
    nodes = full["data"][2]
    assert len(nodes["x"]) == sum(len(s) for s in rec.steps)
    best_x = [x for x in full["data"][1]["x"] if x is not None]
    assert len(best_x) == 2 * len(rec.hypotheses[0].token_ids)  # one segment per token of the chosen output
    early = beam_tree(rec, upto=1).to_dict()
    assert len(early["data"][2]["x"]) == len(rec.steps[0]) + len(rec.steps[1])
    html = beam_table_html(rec)
    assert html.count("<tr data-rank=") == len(rec.hypotheses) == 3
