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
