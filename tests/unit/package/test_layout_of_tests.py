"""tests/ is a tree a newcomer can browse (tests/README.md): every test file sits in the folder of its kind, the
unit tests in the folder of the layer they test, and what tests share lives in tests/support/; no test file
imports another test file."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent
KINDS = {"unit", "browser", "served", "real_model", "architectures"}
# unit/<layer>: a layer of the package (inspector/<layer>/), or what sits beside it in the repository
UNIT_BESIDE = {"package", "bench", "harness"}


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of the file at any depth; a relative import as its dots and name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_the_tree_holds_the_test_files_and_the_test_ids_it_always_did():
    assert len(all_test_files()) >= 140  # the 140 files of the flat folder, none lost in the move
    names = [p.name for p in all_test_files()]
    # rootdir-style imports name a test module by its file name alone: two files of one name could not both run
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_test_file_is_in_the_folder_of_its_kind():
    layers = {p.name for p in (ROOT / "inspector").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    misplaced = []
    for path in all_test_files():
        parts = path.relative_to(TESTS).parts
        kind = parts[0]
        if kind == "unit":
            ok = len(parts) == 3 and parts[1] in layers | UNIT_BESIDE
        else:
            ok = len(parts) == 2 and kind in KINDS
        if not ok:
            misplaced.append(str(path.relative_to(ROOT)))
    assert not misplaced, f"put each in its kind's folder (tests/README.md says which): {misplaced}"


def test_no_test_file_imports_another_test_file():
    """A test file or a support module imports from `tests.support` only: never a test module (by its package
    path or, as pytest's sys.path allows, by its bare name), never relatively."""
    test_modules = {p.stem for p in all_test_files()}
    offenders = []
    for path in [*all_test_files(), *sorted((TESTS / "support").glob("*.py"))]:
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            bad = (module.startswith(".")
                   or (top == "tests" and not (module == "tests.support" or module.startswith("tests.support.")))
                   or top in test_modules or top == "conftest")
            if bad:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


def test_support_holds_helpers_not_tests():
    support = sorted((TESTS / "support").glob("*.py"))
    assert (TESTS / "support" / "__init__.py") in support
    holding_tests = [p.name for p in support if p.name.startswith("test_")
                     or any(isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                            for n in ast.parse(p.read_text(encoding="utf-8")).body)]
    assert not holding_tests, holding_tests


def test_browser_files_are_marked_browser():
    """The collection order (tests/conftest.py) and `-m "not browser"` find browser tests by their mark."""
    unmarked = [p.name for p in sorted((TESTS / "browser").glob("test_*.py"))
                if "pytest.mark.browser" not in p.read_text(encoding="utf-8")]
    assert not unmarked, unmarked
