"""The page is its registry: every panel is laid out and wired from `inspector.ui.registry`, a view is one
module plus one line (the README's example, run here), and a panel's state is what admission counts."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from inspector.engine.config import SamplingParams
from inspector.ui import admission, registry
from inspector.ui.panel import Panel, PanelState, ViewPanel, arrays_nbytes
from tests.support.lab_context import make_page
from tests.support.handlers import SAMPLING, make
from tests.support.viz_records import tiny_loaded  # noqa: F401

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_example() -> str:
    """The example panel module of the README's "How it is built" (the added lines of its first diff)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```diff\n(\+# inspector/ui/views/entropy\.py.*?)```", text, re.S).group(1)
    return "\n".join(line[1:] for line in block.splitlines())


def test_every_panel_has_a_unique_key_tab_and_status_id():
    panels = registry.VIEWS + registry.LABS
    for attr in ("key", "tab_id", "title"):
        values = [getattr(p, attr) for p in panels]
        assert len(set(values)) == len(values), attr
    ids = [p.status_id for p in panels if p.status_id]
    assert len(set(ids)) == len(ids)
    assert all(issubclass(p, Panel) for p in panels)


def test_the_readmes_example_view_is_one_module_and_one_registry_line(tiny_loaded, monkeypatch):  # noqa: F811
    module = types.ModuleType("inspector.ui.views.entropy")
    exec(compile(readme_example(), "inspector/ui/views/entropy.py", "exec"), module.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, module.__name__, module)
    view = module.EntropyView
    assert issubclass(view, ViewPanel) and module.__doc__
    monkeypatch.setattr(registry, "VIEWS", registry.VIEWS[:-1] + (view,) + registry.VIEWS[-1:])
    h, store = make(tiny_loaded)  # the bare page builds its panels from the registry
    sid = h.prefill(None, "The quick brown fox", False, "", *SAMPLING, 6, 0, 0)[0]
    h.step(sid, *SAMPLING, 0, 0)
    views = h.show_tab("entropy")(sid, 0, 0)  # its tab opened: its slot is drawn from the run
    fig = views["entropy_fig"]
    assert list(fig.data[0].x) == [0, 1] and fig.data[0].y[1] == store.get(sid).session.records[1].sample.entropy_raw
    assert "entropy_fig" not in h.step(sid, *SAMPLING, 0, 0) or store.get(sid).tab == "entropy"

    from inspector.ui.app import build_app
    from inspector.ui.bundle import ViewSlot

    demo = build_app(tiny_loaded)  # and the page lays out its tab and slot
    slots = {b.elem_id for b in demo.blocks.values() if isinstance(b, ViewSlot)}
    assert "entropy-chart" in slots
    assert any(getattr(b, "elem_id", None) == "tab-entropy" for b in demo.blocks.values())


def test_admission_counts_what_every_panel_state_holds(tiny_loaded):  # noqa: F811
    page = make_page(tiny_loaded)
    sid, visitor = page.store.get_or_create(None)
    visitor.session.prefill("Hello world", SamplingParams(), max_new_tokens=4)
    before = admission.held_nbytes(visitor)
    out = page.panels["kvpolicy"].run_policy(sid, "h2o", 8, 2, 0, 0, "Hello world, the cache", False, "", 4)
    assert 'data-error="0"' in out["status"]
    state = visitor.labs["kvpolicy"]
    held = admission.held_nbytes(visitor)
    assert held["kvpolicy"] == state.nbytes() == arrays_nbytes(state.run) > 0
    assert {k: v for k, v in held.items() if k != "kvpolicy"} == before

    class Holder(PanelState):
        def nbytes(self) -> int:
            return 12345

    visitor.labs["anything"] = Holder()
    assert admission.held_nbytes(visitor)["anything"] == 12345  # a new panel's state counts with no admission change


def test_the_training_lab_reserves_its_step_while_it_runs(tiny_loaded, monkeypatch):  # noqa: F811
    """The Training lab holds no state between runs, but its step's gradients and activations are reserved
    for the server while it runs (one at a time: it holds the model's thread), and refused when full."""
    from inspector.analysis.training import estimated_step_nbytes
    from inspector.ui.app_model import AppLimits

    page = make_page(tiny_loaded)
    lab = page.panels["training"]
    seen = []
    real = admission.process_nbytes
    import inspector.analysis.training as training

    step = training.training_step
    monkeypatch.setattr("inspector.ui.labs.training.training_step",
                        lambda *a, **k: (seen.append(real(page.store)), step(*a, **k))[1])
    out = lab.train(page.store.new_id(), "The quick brown fox jumps over the lazy dog")
    assert 'data-error="0"' in out["status"], out["status"]
    n = len(tiny_loaded.tokenizer.prompt_ids("The quick brown fox jumps over the lazy dog", False))
    need = estimated_step_nbytes(tiny_loaded.config, page.inventory.params, n)
    assert seen == [need] and real(page.store) == 0  # reserved while it ran, released after
    page.limits = AppLimits(max_sessions=1, max_trace_mb=need / 2 / 2**20)  # a server smaller than the step
    out = lab.train(page.store.new_id(), "The quick brown fox jumps over the lazy dog")
    assert "the server is full" in out["status"] and real(page.store) == 0


def training_step_measured_and_estimated(loaded, ids: list[int]) -> tuple[int, int]:
    """(bytes a training step on `ids` measured for activations and gradients, the admission's estimate)."""
    from inspector.analysis.training import estimated_step_nbytes, training_step

    step = training_step(loaded.model, ids)
    parts = {m.label: m.bytes for m in step.training_memory}
    measured = parts["activations kept for backward"] + parts["gradients"]
    estimate = estimated_step_nbytes(loaded.config, sum(p.numel() for p in loaded.model.parameters()), len(ids))
    return measured, estimate


def test_the_training_estimate_bounds_what_a_step_holds(tiny_loaded):  # noqa: F811
    ids = tiny_loaded.tokenizer.prompt_ids("The quick brown fox jumps over the lazy dog, twice over.", False)
    measured, estimate = training_step_measured_and_estimated(tiny_loaded, ids)
    assert measured <= estimate <= 2 * measured


@pytest.mark.slow
def test_the_training_estimate_bounds_the_default_model(default_model):
    measured, estimate = training_step_measured_and_estimated(default_model, list(range(1000, 1064)))
    assert measured <= estimate <= 1.5 * measured


def test_a_model_without_a_chat_template_starts_with_chat_off_and_says_why(tiny_loaded, monkeypatch):  # noqa: F811
    """A base model (no chat template, as Gemma 3 270M): the page opens with "Chat template" unticked and
    disabled, naming why, its examples send plain prompts, and the first Prefill with the page's values runs."""
    import gradio as gr

    from inspector.ui.app import build_app

    monkeypatch.setattr(tiny_loaded.tokenizer, "chat_template", None)
    assert not tiny_loaded.tokenizer.has_chat_template
    demo = build_app(tiny_loaded)
    chat = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "chat-toggle")
    assert chat.value is False and chat.interactive is False and "has none" in chat.label
    examples = next(b for b in demo.blocks.values() if isinstance(b, gr.Dataset))
    assert all(row[1] is False for row in examples.samples)
    note = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "system-note-view")
    assert 'data-system="off"' in note.value
    h, _ = make(tiny_loaded)
    sid, views = h.prefill(None, "The quick brown fox", chat.value, "", *SAMPLING, 4, 0, 0)
    assert "prefill done" in views["status"] and "ii-error" not in views["status"]


def test_a_handler_that_changes_nothing_skips_every_output():
    """{} from a handler means "nothing changes": each component gets gr.skip(). (Returned as it was, Gradio
    took an empty dict for a lone output's value: the Training lab's text box once became "{}".)"""
    import gradio as gr

    from inspector.ui.panel import named_outputs

    with gr.Blocks():
        box, line = gr.Textbox(), gr.HTML()
    fn = named_outputs(lambda: {}, {"text": box})
    assert fn() == {box: gr.skip()}
    fn = named_outputs(lambda: {"status": "ok"}, {"text": box, "status": line})
    assert fn() == {line: "ok"}
