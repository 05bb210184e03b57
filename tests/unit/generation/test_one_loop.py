"""One loop: every forward of the product runs through `inspector.generation.loop`, finish reasons come from
`Sequence` and are named by one table, and the bench shares plumbing with the tests only through `harness/`.

Static checks read the source (AST): no module of inspector/ outside engine/ and generation/ runs a forward
of the engine (`steps.forward`, `prefill`, `decode_step`, `step_rows`, `recompute_step`), calls a model or
advances a KV cache (the allowed exceptions are listed with why; bench/ is not checked: it times the engine
itself); no finish-reason string is written outside the module that defines them; bench/ and harness/
import nothing from tests/, and bench/'s modules import each other without a circle. Dynamic checks run
each path that used to decode on its own (the KV-policy watch, quantization fidelity and speed,
speculative decoding and its plain peer, beam search, a patched run) on a tiny model with a spy on
`Transformer.forward`: every forward has the loop on its stack. The loop's greedy and teacher-forced
helpers are checked against a recompute, and the patched run against the interventions tab's former code.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

from inspector.engine import steps
from inspector.engine.model import Transformer
from inspector.generation import loop
from inspector.generation.finish import FINISH_LABELS, FinishReason, finish_label
from inspector.generation.sequence import Sequence
from tests.support.engine_fixtures import tiny_model
from tests.support.viz_records import tiny_loaded  # noqa: F401 (fixture)
from tests.support.imports import all_imports

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "inspector"
LOOP_LAYERS = {"engine", "generation"}  # where a forward may be run
FORWARDS = {"forward", "prefill", "decode_step", "step_rows", "recompute_step"}  # inspector.engine.steps
# A forward outside the loop on purpose, with why: the training step needs gradients (the loop runs under
# inference mode and feeds a KV cache; a training forward has neither).
MODEL_CALLS_ALLOWED = {"analysis/training.py": "a training step's forward and backward, with gradients"}
# Where a KV cache is advanced outside the loop, with why: keys and values a forward computed before, copied in.
ADVANCES_ALLOWED = {"session/restore.py": "a saved trace's keys and values written back into a cache",
                    "analysis/patching.py": "the corrupted prompt's keys and values copied into every row"}


def product_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.relative_to(PACKAGE).parts[0] not in LOOP_LAYERS and p.parent != PACKAGE)


def steps_names(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names bound to the module inspector.engine.steps, names bound to its forward functions, names bound
    to the module inspector.generation.loop)."""
    modules, functions, loops = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "inspector.engine":
            modules |= {a.asname or a.name for a in node.names if a.name == "steps"}
        elif isinstance(node, ast.ImportFrom) and node.module == "inspector.generation":
            loops |= {a.asname or a.name for a in node.names if a.name == "loop"}
        elif isinstance(node, ast.ImportFrom) and node.module == "inspector.engine.steps":
            functions |= {a.asname or a.name for a in node.names if a.name in FORWARDS}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "inspector.engine.steps" and a.asname}
    return modules, functions, loops


def forward_calls(path: Path) -> list[str]:
    """Each place `path` runs a forward outside the loop: 'line: what'."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, functions, loops = steps_names(tree)
    found = [f"{n.lineno}: imports {a.name} from inspector.engine.steps" for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and n.module == "inspector.engine.steps"
             for a in n.names if a.name in functions or a.asname in functions]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FORWARDS and isinstance(node.value, ast.Name) \
                and node.value.id in modules:
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "model":  # `model(ids, ...)`: the Transformer itself
                found.append(f"{node.lineno}: model(...)")
            elif isinstance(f, ast.Attribute) and f.attr == "forward" and not (
                    isinstance(f.value, ast.Name) and f.value.id in loops):  # `model.forward(...)`, not `loop.forward`
                found.append(f"{node.lineno}: .forward(...)")
            elif isinstance(f, ast.Attribute) and f.attr == "model" and not (
                    isinstance(f.value, ast.Name) and f.value.id == "self"):  # `loaded.model(...)`
                found.append(f"{node.lineno}: .model(...)")
    return found


def test_the_static_check_sees_a_forward_outside_the_loop(tmp_path):
    """The checker itself: each way of running a forward is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from inspector.engine import steps as engine\nfrom inspector.engine.steps import prefill\n"
                   "engine.decode_step(m, 1, c)\nmodel(ids)\nloaded.model(ids)\nm.forward(ids)\n"
                   "from inspector.generation import loop\nloop.forward(m, c, [ids])\nengine.new_cache(m)\n")
    assert sorted(int(line.split(":")[0]) for line in forward_calls(bad)) == [2, 3, 4, 5, 6]


def test_no_module_outside_the_loop_runs_a_forward():
    offenders = {}
    for path in product_modules():
        rel = str(path.relative_to(PACKAGE))
        found = forward_calls(path)
        if rel in MODEL_CALLS_ALLOWED:
            found = [f for f in found if not f.endswith("model(...)")]
        if found:
            offenders[rel] = found
    assert not offenders, f"run forwards through inspector.generation.loop: {offenders}"


def test_no_module_outside_the_loop_advances_a_kv_cache():
    offenders = []
    for path in product_modules():
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "advance" \
                    and rel not in ADVANCES_ALLOWED:
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"a forward advances the cache (inspector.engine.steps.forward, through the loop): {offenders}"


def test_finish_reasons_are_written_only_where_they_are_defined():
    """No string literal of a finish reason outside generation/finish.py: the reasons are decided by
    `Sequence` and named by `FINISH_LABELS` (docstrings and longer strings, such as help text, may say them)."""
    values = {r.value for r in FinishReason} - {"cancelled", "refused"}  # also plain words of other states
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "generation/finish.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in values:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert not offenders, offenders


def test_one_label_table_names_every_finish_reason():
    from inspector.viz.header import phase_text
    from inspector.viz.tokens import generated_text_html

    assert set(FINISH_LABELS) == set(FinishReason)
    for reason, (short, long) in FINISH_LABELS.items():
        assert finish_label(reason.value) == short and finish_label(reason.value, long=True) == long
        assert phase_text(2, 1, 8, reason.value, False) == f"finished: {short}"
        assert f"[stopped: {long}]" in generated_text_html("x", reason.value)
    assert finish_label(None) == "" and "stopped" not in generated_text_html("x", None)


@pytest.mark.parametrize("folder", ["bench", "harness"])
def test_bench_and_harness_import_nothing_from_tests(folder: str):
    offenders = {p.name: sorted(m for m in all_imports(p) if m == "tests" or m.startswith("tests."))
                 for p in sorted((ROOT / folder).glob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


def test_bench_modules_import_each_other_without_a_circle():
    graph = {p.stem: {m.split(".")[1] for m in all_imports(p) if m.startswith("bench.")}
             for p in (ROOT / "bench").glob("*.py")}

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, f"bench import circle: {' -> '.join(path + [node])}"
        for nxt in graph.get(node, ()):
            visit(nxt, path + [node])

    for name in graph:
        visit(name, [])


@pytest.fixture
def forwards(monkeypatch) -> list[set[str]]:
    """Every `Transformer.forward` run while the test runs, as the set of source files on its stack."""
    seen: list[set[str]] = []
    original = Transformer.forward

    def spy(self, *args, **kwargs):
        files, frame = set(), sys._getframe(1)
        while frame is not None:
            files.add(Path(frame.f_code.co_filename).as_posix())
            frame = frame.f_back
        seen.append(files)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transformer, "forward", spy)
    return seen


def through_loop(seen: list[set[str]]) -> bool:
    return bool(seen) and all(any(f.endswith("inspector/generation/loop.py") for f in s) for s in seen)


def test_the_kv_policy_watch_decodes_through_the_loop(tiny_loaded, forwards):  # noqa: F811
    from inspector.quant.kv_eval import CacheSpec
    from inspector.quant.kv_watch import watch_policy

    tok = tiny_loaded.tokenizer
    run = watch_policy(tiny_loaded.model, tok.encode("The quick brown fox"), 6, CacheSpec("window", 4),
                       tok.piece, tok.decode)
    assert through_loop(forwards) and len(run.steps) == 6 and run.finish == "max_tokens"


def test_quantization_fidelity_and_speed_decode_through_the_loop(tiny_loaded, forwards):  # noqa: F811
    from inspector.quant.lab import QuantLab

    lab = QuantLab(tiny_loaded)
    rec = lab.compare(tiny_loaded.tokenizer.encode("The quick brown fox"), 5, "fp32")
    assert rec.kl_max == 0.0 and lab.decode_tok_s("fp32", n_steps=2) > 0
    assert through_loop(forwards)


def test_speculative_decoding_and_its_plain_peer_decode_through_the_loop(tiny_loaded, forwards):  # noqa: F811
    from inspector.engine.config import SamplingParams
    from inspector.speculative.decoding import SpeculativeDecoder, plain_decode
    from inspector.speculative.drafters import make_drafter

    ids = tiny_loaded.tokenizer.encode("The quick brown fox jumps over the lazy dog. The quick brown fox")
    run = SpeculativeDecoder(tiny_loaded, make_drafter("early-exit:1", tiny_loaded.model), 3, SamplingParams(),
                         max_new_tokens=8)
    run.prefill(ids)
    for _ in run.play():
        pass
    plain, timing = plain_decode(tiny_loaded.model, ids, 7)
    assert plain == run.generated_ids and timing.tokens == 7
    assert through_loop(forwards)


def test_beam_search_decodes_through_the_loop(forwards):
    from inspector.generation.beam import beam_search

    rec = beam_search(tiny_model(), [1, 17, 42], 3, 5, eos_ids=[2])
    assert through_loop(forwards) and rec.finish in ("eos", "max_tokens")


def test_greedy_is_the_argmax_of_a_recompute_and_the_sequence_decides_the_end():
    model = tiny_model()
    prompt = [1, 17, 42, 99]
    seq = Sequence(prompt, 6, model.config.max_position_embeddings)
    rows = list(loop.greedy(seq, model, steps.new_cache(model)))
    assert len(rows) == len(seq.generated_ids) == 6 and seq.finish == FinishReason.LENGTH
    for k, row in enumerate(rows):
        full = loop.forward(model, steps.new_cache(model), [prompt + seq.generated_ids[:k]])[0]
        assert int(full.argmax()) == seq.generated_ids[k]
        torch.testing.assert_close(row, full, rtol=1e-4, atol=1e-4)
    stop = Sequence(prompt, 6, 100, stop_ids=[seq.generated_ids[2]])
    list(loop.greedy(stop, model, steps.new_cache(model)))
    assert stop.generated_ids == seq.generated_ids[:3] and stop.finish == FinishReason.EOS
    full = Sequence(prompt, 6, len(prompt) + 2)
    list(loop.greedy(full, model, steps.new_cache(model)))
    assert full.generated_ids == seq.generated_ids[:2] and full.finish == FinishReason.CONTEXT_FULL


def test_teacher_forcing_greedy_tokens_repeats_the_greedy_run_exactly():
    """Same tokens, same forwards: the logits equal bit for bit (what fidelity's first divergence relies on);
    forced tokens put in a greedy run are fed as given."""
    model = tiny_model()
    prompt = [1, 17, 42, 99]
    seq = Sequence(prompt, 5, 100)
    rows = list(loop.greedy(seq, model, steps.new_cache(model)))
    forced = list(loop.teacher_forced(model, steps.new_cache(model), prompt, seq.generated_ids[:-1]))
    assert len(forced) == 5 and all(torch.equal(a, b) for a, b in zip(rows, forced))
    other = [7, 8, 9, 10, 11]
    replay = Sequence(prompt, 5, 100)
    rows = list(loop.greedy(replay, model, steps.new_cache(model), forced=other))
    want = list(loop.teacher_forced(model, steps.new_cache(model), prompt, other[:-1]))
    assert replay.generated_ids == other and all(torch.equal(a, b) for a, b in zip(rows, want))


def old_patched_run_html(loaded, args: tuple, layer: int, position: int, show: int = 8) -> str:
    """The interventions tab's `_patched_run` as it was before it called analysis + viz (its own greedy loop)."""
    from inspector.analysis import patching
    from inspector.generation.levers import Levers
    from inspector.viz.common import esc, show_piece

    c, r, a, w, point = args
    score, patch = patching.patch_one(loaded.model, c, r, a, w, point, layer, position)
    model, ids, levers = loaded.model, list(r), Levers(interventions=(patch,))
    cache = steps.new_cache(model)
    logits = loop.forward(model, cache, [ids], levers)[0]
    probs = logits.softmax(-1)
    top = probs.topk(5)
    tok = loaded.tokenizer
    tops = ", ".join(f"{esc(show_piece(tok.piece(int(i)), 12))} {float(p):.0%}"
                     for p, i in zip(top.values, top.indices))
    out = []
    for _ in range(show):
        t = int(logits.argmax())
        out.append(t)
        logits = loop.forward(model, cache, [[t]], levers)[0]
    return (f"<div id='iv-patched-run' data-cell='{layer}:{position}'><b>{esc(patch.label)}</b>: recovered "
            f"{score:.3f}; next tokens {tops}; greedy continuation: <code>{esc(tok.decode(out))}</code></div>")


@pytest.mark.parametrize("point,layer,position", [("resid_pre", 0, 3), ("mlp_out", 1, 5), ("attn_out", 1, 0)])
def test_a_patched_run_is_what_the_tab_computed_before(tiny_loaded, forwards, point, layer, position):  # noqa: F811
    from inspector.analysis import patching
    from inspector.viz.interventions import patched_run_html

    tok = tiny_loaded.tokenizer
    clean, corrupt = tok.encode("the dog sat on the mat"), tok.encode("the bat sat on the mat")
    answer, wrong = tok.encode("#")[0], tok.encode("!")[0]
    args = (clean, corrupt, answer, wrong, point)
    rec = patching.patched_run(tiny_loaded.model, *args, layer, position, piece=tok.piece, decode=tok.decode)
    score, _ = patching.patch_one(tiny_loaded.model, *args, layer, position)
    assert rec.recovered == score and len(rec.continuation_ids) == 8 and len(rec.top_ids) == 5
    assert rec.top_probs == sorted(rec.top_probs, reverse=True)
    assert tok.decode(rec.continuation_ids) == rec.continuation_text
    assert through_loop(forwards)
    assert patched_run_html(rec) == old_patched_run_html(tiny_loaded, args, layer, position)
