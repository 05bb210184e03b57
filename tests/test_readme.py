"""The README's quick start is what CI runs: its test command appears verbatim in .ci/run."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
