"""The Space bundle: front matter that the Hub accepts, a gradio pin equal to sdk_version, and every file
the app imports inside the bundle (walked with ast, then imported for real from the bundle alone)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import metadata_load
from packaging.requirements import Requirement

from inspector.ui.app_model import HUB_MODEL_ID
from inspector.space.bundle import SpaceBuildError, build_bundle, bundle_files, source_root

ROOT = source_root()
REQUIRED_KEYS = {"title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "python_version",
                 "app_file", "short_description", "models", "preload_from_hub", "suggested_hardware"}


def requirements(path: Path) -> dict[str, Requirement]:
    """Normalised distribution name -> Requirement, for the non-option lines of a requirements file."""
    reqs = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            reqs[normalise(req.name)] = req
    return reqs


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("space") / "bundle"
    build_bundle(dest)
    return dest


# ---- front matter and requirements
def test_front_matter_parses_with_the_hub_loader(bundle):
    meta = metadata_load(bundle / "README.md")
    assert meta is not None, "README.md has no YAML front matter"
    assert REQUIRED_KEYS <= set(meta), f"missing keys: {REQUIRED_KEYS - set(meta)}"
    assert meta["sdk"] == "gradio"
    assert meta["app_file"] == "app.py" and (bundle / meta["app_file"]).is_file()
    assert meta["suggested_hardware"] == "cpu-basic"
    assert meta["models"] == [HUB_MODEL_ID]
    assert isinstance(meta["python_version"], str) and re.fullmatch(r"3\.\d+", meta["python_version"])
    assert 0 < len(meta["short_description"]) <= 60  # the Hub rejects longer ones
    (preload,) = meta["preload_from_hub"]
    repo, files = preload.split(" ")
    assert repo == HUB_MODEL_ID
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(files.split(","))


def test_gradio_pin_equals_sdk_version_and_satisfies_the_package(bundle):
    meta = metadata_load(bundle / "README.md")
    reqs = requirements(bundle / "requirements.txt")
    pin = reqs["gradio"]
    (spec,) = pin.specifier
    assert spec.operator == "==" and spec.version == str(meta["sdk_version"])
    # the pinned gradio also satisfies the package's own dependency range
    deps = {normalise(Requirement(d).name): Requirement(d)
            for d in importlib.metadata.requires("inference-inspector") if "extra ==" not in d}
    assert deps["gradio"].specifier.contains(spec.version)


def test_requirements_cover_the_package_runtime_dependencies(bundle):
    reqs = requirements(bundle / "requirements.txt")
    runtime = {normalise(Requirement(d).name) for d in importlib.metadata.requires("inference-inspector")
               if "extra ==" not in d}
    assert runtime <= set(reqs), f"in pyproject but not in spaces/requirements.txt: {runtime - set(reqs)}"
    assert "transformers" not in reqs  # test oracle only
    assert str(reqs["torch"].specifier).startswith("==")  # unpinned torch pulls a CUDA build


# ---- contents
def test_bundle_holds_the_sources_and_nothing_else(bundle):
    files = bundle_files(bundle)
    assert (bundle / "README.md").read_bytes() == (ROOT / "spaces/README.md").read_bytes()
    assert (bundle / "requirements.txt").read_bytes() == (ROOT / "spaces/requirements.txt").read_bytes()
    assert (bundle / "app.py").read_bytes() == (ROOT / "app.py").read_bytes()
    package = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "inspector").rglob("*.py"))
    assert package and set(package) <= set(files)
    for rel in package:
        assert (bundle / rel).read_bytes() == (ROOT / rel).read_bytes(), rel
    if (ROOT / "static").is_dir():
        static = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "static").rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)
        assert set(static) <= set(files)
    tops = {f.split("/")[0] for f in files}
    assert tops <= {"README.md", "requirements.txt", "app.py", "inspector", "static"}, tops
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


def _imports(path: Path, package: str | None) -> list[tuple[str, list[str]]]:
    """(module, imported names) for each import in `path`, skipping ones guarded by `except ImportError`.

    Relative imports are resolved against `package` (the dotted package the file belongs to)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = (package or "").split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            found.append((module, [alias.name for alias in node.names]))
    return found


def _module_file(bundle: Path, dotted: str) -> Path | None:
    """The file defining module `dotted` in the bundle (a package's __init__.py), else None."""
    base = bundle.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_package_folder_is_a_regular_package(bundle):
    """setuptools' find_packages skips folders without __init__.py: `pip install .` would drop them."""
    for folder in [bundle / "inspector", *(p for p in (bundle / "inspector").rglob("*") if p.is_dir())]:
        if any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), f"{folder.relative_to(bundle)} has no __init__.py"


def _all_imports(bundle: Path) -> list[tuple[Path, str, list[str]]]:
    out = [(bundle / "app.py", m, names) for m, names in _imports(bundle / "app.py", None)]
    for path in sorted((bundle / "inspector").rglob("*.py")):
        rel = path.relative_to(bundle).with_suffix("")
        package = ".".join(rel.parts[:-1] if rel.name != "__init__" else rel.parts[:-1])
        out += [(path, m, names) for m, names in _imports(path, package)]
    return out


def test_every_inspector_module_the_app_imports_is_in_the_bundle(bundle):
    imports = _all_imports(bundle)
    assert any(m == "inspector" or m.startswith("inspector.") for path, m, _ in imports
               if path.name == "app.py"), "app.py does not import the inspector package"
    for path, module, names in imports:
        if module != "inspector" and not module.startswith("inspector."):
            continue
        assert _module_file(bundle, module), f"{path.relative_to(bundle)} imports {module}, not in the bundle"
        for name in names:  # `from inspector.x import y`: y is a submodule or defined in x
            if _module_file(bundle, f"{module}.{name}") is None:
                assert re.search(rf"\b{re.escape(name)}\b", _module_file(bundle, module).read_text()), \
                    f"{path.relative_to(bundle)}: {module} has no {name}"


def test_every_third_party_import_is_a_listed_requirement(bundle):
    reqs = set(requirements(bundle / "requirements.txt"))
    dists = importlib.metadata.packages_distributions()
    for path, module, _ in _all_imports(bundle):
        top = module.split(".")[0]
        if not top or top == "inspector" or top in sys.stdlib_module_names or top == "__future__":
            continue
        assert top != "transformers", f"{path.relative_to(bundle)} imports transformers (test oracle only)"
        provided_by = {normalise(d) for d in dists.get(top, [])}
        assert provided_by & reqs, (f"{path.relative_to(bundle)} imports {top} (from {sorted(provided_by)}), "
                                    "which spaces/requirements.txt does not list")


def test_bundle_modules_import_from_the_bundle_alone(bundle):
    """Import every module of the bundled package in a fresh interpreter started in the bundle: each one
    must load, and from the bundle (not from the checkout the tests run in)."""
    modules = sorted(".".join(p.relative_to(bundle).with_suffix("").parts).removesuffix(".__init__")
                     for p in (bundle / "inspector").rglob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "def where(m):  # a namespace package has no __file__, only __path__\n"
        "    return [m.__file__] if getattr(m, '__file__', None) else list(getattr(m, '__path__', []))\n"
        "bad = [n for n, m in list(sys.modules.items()) if n.split('.')[0] == 'inspector'\n"
        "       and not all(w.startswith(sys.argv[1]) for w in where(m) or ['?'])]\n"
        "print('outside:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(bundle)], cwd=bundle, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(bundle.parent),
                                                       "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def test_static_paths_the_code_names_are_in_the_bundle(bundle):
    sources = [bundle / "app.py", *(bundle / "inspector").rglob("*.py")]
    for path in sources:
        for rel in re.findall(r"""["'](static/[\w./-]+\.\w+)["']""", path.read_text()):
            assert (bundle / rel).is_file(), f"{path.relative_to(bundle)} names {rel}, not in the bundle"


# ---- the build step
def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    layout = {"inspector/__init__.py": "", "inspector/__pycache__/x.pyc": "junk", "app.py": "import inspector\n",
              "static/app.css": "body{}", "spaces/README.md": "---\nsdk: gradio\n---\n",
              "spaces/requirements.txt": "gradio==6.31.0\n", "tests/test_x.py": ""}
    for rel, text in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_build_maps_the_layout_and_refuses_to_clobber(tmp_path):
    root = _fake_root(tmp_path)
    dest = tmp_path / "out"
    files = build_bundle(dest, root=root)
    assert files == ["README.md", "app.py", "inspector/__init__.py", "requirements.txt", "static/app.css"]
    with pytest.raises(SpaceBuildError, match="not empty.*--overwrite"):
        build_bundle(dest, root=root)
    (dest / "stale.txt").write_text("old")
    assert "stale.txt" not in build_bundle(dest, root=root, overwrite=True)
    for inside in (root, root / "spaces", tmp_path):  # never build over (or around) the sources
        with pytest.raises(SpaceBuildError, match="overlaps the source tree"):
            build_bundle(inside, root=root, overwrite=True)
    assert (root / "spaces/README.md").is_file()


def test_build_names_what_is_missing(tmp_path):
    root = _fake_root(tmp_path)
    (root / "app.py").unlink()
    with pytest.raises(SpaceBuildError, match=r"missing: app\.py"):
        build_bundle(tmp_path / "out", root=root)
