"""The README's quick start is what CI runs: its test command appears verbatim in .ci/run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_quick_start_has_exactly_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert "python app.py" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_exactly():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quick_start_commands()[1] in ci


def test_ci_takes_the_newcomers_path_with_the_torch_pip_resolves():
    """CI installs no torch of its own before the README's command: it tests what a newcomer gets."""
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not [line for line in commands if "torch" in line], commands


def test_ci_fails_on_no_tests_collected():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    assert '"$rc" -eq 5' in ci


def test_readme_pictures_exist():
    """Every picture the README shows is in the repository (docs/screenshots.py writes them)."""
    readme = (ROOT / "README.md").read_text()
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert len(pictures) >= 10
    missing = [p for p in pictures if not (ROOT / p).is_file()]
    assert not missing, missing


def benchmark_modules() -> list[str]:
    """The modules the README's Benchmarks section tells a reader to run, in its order."""
    section = (ROOT / "README.md").read_text().split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`python -m (bench\.\w+)", section)


def test_readme_lists_every_bench_script_by_its_module_command():
    scripts = {f"bench.{p.stem}" for p in (ROOT / "bench").glob("*.py")
               if '__name__ == "__main__"' in p.read_text(encoding="utf-8")}  # scripts, not their helper modules
    assert set(benchmark_modules()) == scripts
    # by file path they would not run: `tests.*` and this checkout's `inspector` import from the root
    assert not re.findall(r"python (?:bench|docs)/\w+\.py", (ROOT / "README.md").read_text())


SCRIPTS = [*sorted(set(benchmark_modules())), "docs.screenshots"]
# Runs each module named on its command line as `python -m module --help` runs it (runpy, as `-m` does), in
# one process, so torch is imported once for all the scripts, not once per script; prints, as JSON, each
# module's exit code, what it printed and any traceback.
HELP_OF_EACH = """
import contextlib, io, json, runpy, sys, traceback
results = {}
for module in sys.argv[1:]:
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv = [module, "--help"]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    results[module] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def scripts_help() -> dict[str, list]:
    """{module: [exit code, stdout, stderr]} of each script's `--help`, run from the root as a reader would."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # what a reader's shell has
    out = subprocess.run([sys.executable, "-c", HELP_OF_EACH, *SCRIPTS], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", SCRIPTS)
def test_bench_and_docs_scripts_run_as_modules(module: str, scripts_help: dict[str, list]):
    code, stdout, stderr = scripts_help[module]
    assert code == 0, stderr[-2000:]
    assert stdout.startswith("usage: "), stdout[:200]


@pytest.mark.slow
def test_readme_levers_example_runs():
    """The README's Python example of the levers runs as written and finishes a generation."""
    text = (ROOT / "README.md").read_text()
    code = re.search(r"\*\*Levers from Python\.\*\*.*?```python\n(.*?)```", text, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith(("max_tokens", "eos")) and len(out.stdout.split()) > 5


def layout_tree() -> list[tuple[Path, str]]:
    """(the folder an entry or a comment line names files of, the line's comment) for every line of the
    tree in "How it is built": an entry `name.py` or `name/` sits at its indent (two spaces a level)."""
    section = (ROOT / "README.md").read_text().split("## How it is built", 1)[1]
    tree = re.search(r"```\n(.*?)\n```", section, re.S).group(1)
    parents: list[Path] = [ROOT]
    base, out = ROOT, []
    for line in tree.splitlines():
        entry, _, comment = line.partition("#")
        name = entry.strip()
        if name:
            depth = (len(entry) - len(entry.lstrip())) // 2
            path = parents[depth] / name.rstrip("/")
            assert path.exists(), f"the README's layout names {path.relative_to(ROOT)}, which does not exist"
            if name.endswith("/"):
                del parents[depth + 1:]
                parents.append(path)
            base = path if name.endswith("/") else path.parent
        out.append((base, comment))
    return out


def test_the_layout_tree_names_only_files_that_exist():
    """Every entry of the layout tree exists, and so does every `name.py` its comments name in that folder."""
    for base, comment in layout_tree():
        for name in re.findall(r"\b(\w+\.py)\b", comment):
            assert (base / name).exists(), f"the README's layout mentions {(base / name).relative_to(ROOT)}"


@pytest.mark.parametrize("folder", ["inspector/engine", "inspector/generation"])
def test_the_layout_tree_names_every_module_of_the_engine_and_the_loop(folder: str):
    """The engine's and the generation loop's modules are each named in the tree (a line or a comment)."""
    named = set()
    for base, comment in layout_tree():
        named |= {base / n for n in re.findall(r"\b(\w+\.py)\b", comment)}
    section = (ROOT / "README.md").read_text().split("## How it is built", 1)[1]
    tree = re.search(r"```\n(.*?)\n```", section, re.S).group(1)
    entries = {line.partition("#")[0].strip() for line in tree.splitlines()}
    missing = [p.name for p in sorted((ROOT / folder).iterdir())
               if p.suffix == ".py" and p.name != "__init__.py" and p not in named and p.name not in entries]
    assert not missing, f"{folder} modules the README's layout does not name: {missing}"
