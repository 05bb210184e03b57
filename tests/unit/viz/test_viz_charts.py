"""Every chart explains itself: each plotly figure builder in `inspector.viz`, run on records the engine
and the labs produce over a tiny model, gives a figure with a title short enough to show whole on a phone,
a named axis (with its unit, where the quantity has one) on every axis it shows, and a legend, with every
series named, where it draws more than one series.

The builders are found by their return annotation and wrapped while the page's handlers run, so a new
builder is walked too (or named in `NOT_DRAWN_BY_THE_PAGE`, with records made here)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import plotly.graph_objects as go
import pytest

import inspector.viz
from inspector.analysis.findings import Attribution, LayerParts, PatchSweep
from inspector.viz.common import TITLE_LINE
from tests.support.lab_context import make_ctx
from tests.support.viz_records import tiny_loaded  # noqa: F401
from tests.support.tiny import tiny_moe_dir  # noqa: F401

SAMPLING = (0.8, 5, 1.0, 0.0, 1)  # temperature, top-k, top-p, min-p, seed: top-k removes tokens
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
# A quantity that has a unit must say it on its axis: what an axis title names -> the units it may use.
UNITS = {r"\bbytes?\b|\bmemory\b|\bKV cache kept\b": r"\((bytes|KiB|MiB|GiB)\)|^(bytes|KiB|MiB|GiB)$|FLOP/byte",
         r"\btime\b|\bms\b": r"\bms\b|\(s\)",
         r"\bKL\b": r"\bnats\b"}


def builders() -> dict[str, tuple]:
    """{"module.function": (module, name)} of every function in inspector.viz that returns a plotly figure."""
    found = {}
    for info in pkgutil.iter_modules(inspector.viz.__path__):
        module = importlib.import_module(f"inspector.viz.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and inspect.signature(fn).return_annotation in ("go.Figure", go.Figure):
                found[f"{info.name}.{name}"] = (module, name)
    return found


# The placeholder (a hint, no axes) shown before anything has run, and the plain figure every chart is built
# with (each chart is checked as its own builder's).
NOT_A_CHART = {"common.empty_figure", "common.figure"}


@pytest.fixture(scope="module")
def drawn(tiny_loaded, tiny_moe_dir) -> dict[str, list[go.Figure]]:  # noqa: F811
    """Every figure the builders drew while the page's handlers (main views and labs) ran, by builder; a
    mixture of experts' page too, for its Routing view and the Timing view's weights read per step."""
    from inspector.engine.config import SamplingParams
    from inspector.generation.beam import beam_search
    from inspector.models.loader import load_model
    from inspector.serving.memory import shipped_configs
    from inspector.ui.labs.serving_memory import MemoryCalculator
    from tests.support.handlers import make

    out: dict[str, list[go.Figure]] = {}
    patch = pytest.MonkeyPatch()

    def recording(key, fn):
        def wrapper(*args, **kwargs):
            fig = fn(*args, **kwargs)
            out.setdefault(key, []).append(fig)
            return fig
        return wrapper

    for key, (module, name) in builders().items():
        patch.setattr(module, name, recording(key, getattr(module, name)))
    beam_tree = inspector.viz.beams.beam_tree  # the wrapped one
    try:
        h, _ = make(tiny_loaded)
        sid = h.prefill(None, PROMPT, False, "", *SAMPLING, 8, 1, 1)[0]
        h.show_tab("attention")(sid, 1, 1)  # after the prefill: the whole pattern as a heatmap
        for _ in range(2):
            h.step(sid, *SAMPLING, 1, 1)
        for tab in ("residual", "attention", "kv", "sampling", "timing"):
            h.show_tab(tab)(sid, 1, 1)
        h.select(sid, 2, 1, 1)
        h.preview(sid, 1.5, 3, 0.9, 0.0, 2)
        h.page.panels["timing"].ops.time_operations(sid, -1, 1)  # the Timing view's per-operation roofline
        inspector.viz.sampling.sampling_bars(h.store.get(sid).session.records[-1].sample)  # the CLI's chart
        atlas = h.page.panels["attention"].atlas  # the Attention view's head atlas: map, patterns, ablations
        atlas.compute(sid, 6, 2, 0)
        atlas.show_head(sid, "1.1")
        atlas.ablate(sid, 6, 2, 0, "induction", 2)
        atlas.ablate_in_run(sid, 6, 2, 0, "induction", 2)

        ctx = make_ctx(tiny_loaded)
        labs = ctx.panels
        lab = ctx.store.new_id()
        labs["quant"].compare(lab, "int4-g32", "int8", PROMPT, False, "", 4)
        labs["quant"].histogram(lab, "int8", "model.layers.0.mlp.down_proj.weight")
        labs["kvpolicy"].run_policy(lab, "h2o", 8, 2, 0, 0, PROMPT, False, "", 4)
        labs["kvpolicy"].run_flash(lab, 1, 1, " ".join([PROMPT] * 3), False, "")
        labs["serving"].load(lab, "The capital of France is\nHello there", 2, 4, 0, 1, False, "", 4, *SAMPLING)
        labs["serving"].step(lab)
        labs["serving"].compare.run_compare(lab, 3, 2, 16, "You are the help desk of a public library. Be brief.")
        labs["training"].train(lab, PROMPT)
        MemoryCalculator(None).memory_view(next(iter(shipped_configs().values())).repo_id, 4096, 8, "bf16", 80)
        labs["speculative"].start(lab, "ngram", 1, 3, PROMPT, False, "", 8, 0.0, 0, 1.0, 0.0, 0)
        labs["speculative"].round(lab)
        tok = tiny_loaded.tokenizer
        beam_tree(beam_search(tiny_loaded.model, tok.encode("Hello there"), 3, 4, eos_ids=sorted(tiny_loaded.stop_ids),
                              piece=tok.piece, decode=tok.decode))
        page, entry = ctx.store.get_or_create(None)  # the interventions lab works on the page's run
        entry.session.prefill("The quick brown fox", SamplingParams(temperature=0.8, seed=2), max_new_tokens=6)
        for _ in range(3):
            entry.session.step(SamplingParams(temperature=0.8, seed=2))
        labs["interventions"].apply(page, "head output (attn.hook_z)", "zero", "1", "1", "0", "1", "0", "", "", "0")
        labs["interventions"].compare_branches(page, "0", "1")

        moe, _ = make(load_model(str(tiny_moe_dir)))
        sid = moe.prefill(None, PROMPT, False, "", *SAMPLING, 4, 1, 0)[0]
        moe.step(sid, *SAMPLING, 1, 0)
        for tab in ("routing", "timing"):
            moe.show_tab(tab)(sid, 1, 0)
    finally:
        patch.undo()
    return out


def not_drawn_by_the_page() -> dict[str, go.Figure]:
    """Builders the page does not call (the CLI and bench do), drawn on hand-made records."""
    from inspector.viz.interventions import dla_figure, patch_figure
    from inspector.viz.kv_policies import kl_bytes_figure
    from inspector.viz.routing import experts_read_curve

    layers = [LayerParts([0.5, -2.0], 1.0), LayerParts([0.1, 0.2], -0.25, attn_rest=0.0)]
    sweep = PatchSweep("resid_pre", [0, 1], [0, 1, 2], ["a", "b", "c"], ["a", "x", "c"], [[0, 1, 0], [0, 0.5, 0.2]],
                       2.0, -1.0, 5, 6, 1.5)
    rows = [{"policy": p, "budget": b, "kv_bytes": b * 1000, "kv_bytes_full": 64_000, "kl_mean": 1 / b,
             "top1_agreement": 0.9} for p in ("window", "h2o") for b in (16, 32)]
    uniform = [(b, 8 * (1 - 0.75 ** b)) for b in (1, 2, 4, 8, 16)]
    from types import SimpleNamespace

    from inspector.viz.sampling import entropy_chart

    steps = [SimpleNamespace(step=k, sample=SimpleNamespace(entropy_raw=2.0 / (k + 1), entropy_final=1.0 / (k + 1)))
             for k in range(3)]
    return {"sampling.entropy_chart": entropy_chart(steps),  # the README's example view draws it
            "interventions.dla_figure": dla_figure(Attribution(7, " Paris", -0.15, 0.3, layers)),
            "interventions.patch_figure": patch_figure(sweep),
            "kv_policies.kl_bytes_figure": kl_bytes_figure(rows),
            "routing.experts_read_curve": experts_read_curve(8, 2, uniform, [(1, 2.0), (2, 3.5)])}


def problems(fig: go.Figure) -> list[str]:
    """What a reader would miss in this figure (empty when it explains itself)."""
    full = fig.to_dict()
    layout, traces = full["layout"], full["data"]
    found = []
    title = (layout.get("title") or {}).get("text") or ""
    if not title.strip():
        found.append("no title")
    for line in title.split("<br>"):
        if len(line) > TITLE_LINE:
            found.append(f"a title line longer than {TITLE_LINE} characters (cut off on a narrow screen): {line!r}")
    for name in ("xaxis", "yaxis", "yaxis2"):
        axis = layout.get(name)
        if axis is None and name == "yaxis2" or axis is not None and axis.get("visible") is False:
            continue
        text = ((axis or {}).get("title") or {}).get("text", "").strip()
        if not text:
            found.append(f"{name} has no title")
        for quantity, unit in UNITS.items():
            if re.search(quantity, text) and not re.search(unit, text):
                found.append(f"{name} {text!r} names no unit")
    series = [t for t in traces if t.get("showlegend") is not False]
    if len(series) > 1:
        if layout.get("showlegend") is not True:
            found.append(f"{len(series)} series but showlegend is not set")
        found += [f"a series without a name ({t.get('type')})" for t in series if not t.get("name")]
    return found


def test_every_builder_is_walked(drawn):
    missing = set(builders()) - set(drawn) - NOT_A_CHART - set(not_drawn_by_the_page())
    assert not missing, f"builders no handler drew here: {sorted(missing)}"


def test_every_chart_has_a_whole_title_axis_names_with_units_and_a_legend(drawn):
    figures = [(key, fig) for key, figs in drawn.items() if key not in NOT_A_CHART for fig in figs
               if fig.data]  # a builder with nothing to draw yet returns the placeholder
    figures += list(not_drawn_by_the_page().items())
    assert len(figures) >= 25
    faults = {f"{key}: {p}" for key, fig in figures for p in problems(fig)}
    assert not faults, "\n".join(sorted(faults))


def test_the_checks_catch_a_chart_that_does_not_explain_itself():
    from inspector.viz.common import figure

    bare = go.Figure(data=[{"type": "bar", "y": [1, 2]}, {"type": "bar", "y": [2, 1]}],
                     layout={"title": {"text": "x" * 80}, "yaxis": {"title": {"text": "KV bytes"}}})
    found = problems(bare)
    assert any("longer than" in p for p in found) and any("xaxis has no title" in p for p in found)
    assert any("names no unit" in p for p in found) and any("showlegend" in p for p in found)
    assert any("without a name" in p for p in found)
    good = figure([{"type": "bar", "name": "K", "y": [1]}, {"type": "bar", "name": "V", "y": [2]}], "KV cache",
                  xaxis={"title": {"text": "layer"}}, yaxis={"title": {"text": "KV bytes (KiB)"}})
    assert problems(good) == []


def test_the_int8_histogram_is_on_the_weights_scale(drawn, tiny_loaded):  # noqa: F811
    weight = dict(tiny_loaded.model.named_parameters())["model.layers.0.mlp.down_proj.weight"].detach()
    fig = drawn["quant.histogram_figure"][-1]
    centers = list(fig.data[1].x)  # the int8 matrix, dequantized: its values, never codes × 255
    assert fig.data[1].name == "int8" and float(weight.min()) <= min(centers) < max(centers) <= float(weight.max())
    assert fig.layout.xaxis.title.text == "weight value"


def test_the_kv_chart_says_why_its_bars_are_alike(drawn):
    from dataclasses import replace

    from inspector.viz.kvcache import layer_bars

    fig = drawn["kvcache.layer_bars"][-1]
    notes = [a.text for a in fig.layout.annotations]
    assert any("Every bar is the same" in t and "KV heads" in t for t in notes), notes
    stat = _kv_stat()  # two layers that hold different amounts (a sliding-window layer holds less)
    uneven = layer_bars([stat, replace(stat, layer=1, length=stat.length // 2, nbytes=stat.nbytes // 2)])
    assert not uneven.layout.annotations


def _kv_stat():
    from inspector.session.records import KVLayerStat

    return KVLayerStat(0, 8, 16, 2 * 2 * 8 * 4 * 4, (1, 2, 8, 4), (1, 2, 8, 4), [[0, 1], [2, 3]])
