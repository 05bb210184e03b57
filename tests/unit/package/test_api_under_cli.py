"""The CLI is a door over the Python API, never the reverse: no module of inspector/api/ imports inspector/commands/
(at any depth of the file, type-only imports too), while `inspector run` reaches the API."""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import all_imports

PACKAGE = Path(__file__).resolve().parents[3] / "inspector"


def test_api_imports_nothing_from_commands():
    found = {f"{p.relative_to(PACKAGE)}: {m}" for p in sorted((PACKAGE / "api").rglob("*.py"))
             for m in all_imports(p) if m == "inspector.commands" or m.startswith("inspector.commands.")}
    assert found == set(), sorted(found)


def test_the_run_command_runs_through_the_api():
    modules = all_imports(PACKAGE / "commands" / "run.py", with_names=True)
    assert "inspector.api.model.load" in modules
    assert "inspector.generation.request.RunRequest" in modules
    text = (PACKAGE / "commands" / "run.py").read_text(encoding="utf-8")
    assert "model.start(request" in text and "Session(" not in text


# ---- the CLI on the API: a command parses its flags, calls the public API, formats what it gives
SIMULATOR = "serve_sim.py"  # drives inspector.serving's scheduler over many requests: no `Model` method runs it
MODEL_WORK = ("inspector.models", "inspector.api.measures", "inspector.analysis", "inspector.quant",
              "inspector.session", "inspector.speculative")  # loading a model, computing on one
RECORDS = {"inspector.analysis.head_findings"}  # numpy-only records: the heads flags' ranges and role names
CALLS = {  # command module -> the API it calls: `Model` methods (attributes called) or a public function
    "attribute.py": {"attribute"}, "patch.py": {"patch"}, "quant.py": {"quant"}, "loss.py": {"loss"},
    "kv_eval.py": {"kv_eval"}, "heads.py": {"head_scores", "head_ablation"}, "info.py": {"inventory"},
    "run.py": {"start"}, "decoding.py": {"beam_search"}, "trace.py": {"open_trace"},
}


def _called(path: Path) -> set[str]:
    """Every name called in a file, as `f(...)` or `obj.f(...)`."""
    import ast

    return {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)}


def test_no_command_loads_or_computes_on_a_model_itself():
    found = {f"{p.name}: {m}" for p in sorted((PACKAGE / "commands").glob("*.py")) if p.name != SIMULATOR
             for m in all_imports(p) if m.startswith(MODEL_WORK) and m not in RECORDS}
    assert found == set(), sorted(found)


def test_every_model_command_calls_the_public_api():
    for name, calls in CALLS.items():
        path = PACKAGE / "commands" / name
        imports = all_imports(path, with_names=True)
        assert calls <= _called(path), (name, calls - _called(path))
        assert {"inspector.api.model.load", "inspector.api.traces.open_trace"} & imports or name == "decoding.py", name
    loading = {p.name for p in (PACKAGE / "commands").glob("*.py") if "inspector.api.model" in all_imports(p)}
    assert loading == set(CALLS) - {"decoding.py", "trace.py"}, loading
