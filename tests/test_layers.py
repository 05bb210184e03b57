"""The package layout is the design: each folder of inspector/ is one layer, and imports run one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "inspector"
# layer -> the layers its modules may import (besides itself and the top-level modules of `inspector`:
# errors, input validation, units, which import no layer)
ALLOWED = {
    "engine": set(),  # torch only: ids in, logits and traces out; knows no text, no session, no UI
    "arch": {"engine"},  # inspector/engine/arch: the model families, part of the engine
    "layers": {"engine"},  # inspector/engine/layers: the building blocks the families import, part of the engine
    "models": {"engine"},  # where weights and tokenizers come from
    "generation": {"engine", "models"},  # the one generation loop: Sequence, step, the three levers
    "session": {"engine", "models", "generation"},  # generation state and records over the engine
    "serving": {"engine", "models", "generation"},  # paged cache, scheduler, memory calculator, roofline
    "speculative": {"engine", "models", "generation", "session"},  # drafters and the verifier
    "quant": {"engine", "models", "generation", "session"},  # quantized weights and KV, fidelity against fp32
    "analysis": {"engine", "models", "generation", "session"},  # patching, attribution, branch comparison
    "viz": {"session", "serving", "speculative", "quant", "generation", "analysis"},  # records -> figures (`records` modules only, below)
    "space": set(),  # the Space bundle and its upload
    "commands": {"engine", "models", "generation", "session", "serving", "space", "speculative", "quant", "analysis"},  # the CLI
    "ui": {"engine", "models", "generation", "session", "serving", "viz", "speculative", "quant", "analysis"},  # the web app
}
MAX_LINES = 400


TOP_LEVEL = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}  # importable by every layer


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "inspector" else None


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m == "inspector" or m.startswith("inspector.")}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_one_way(path: Path):
    layer = path.parent.name
    assert layer in ALLOWED, f"{layer}/ is not a known layer: add it to ALLOWED with its dependencies"
    for module in imports(path):
        target = layer_of(module)
        if target is None or target == layer or target in TOP_LEVEL:
            continue
        assert target in ALLOWED[layer], f"{path.relative_to(PACKAGE)} imports {module}: {layer} may not use {target}"
        if layer == "viz":  # plain recorded data (a layer's `records` module: dataclasses, no torch)
            assert module.startswith(f"inspector.{target}.records"), f"viz reads records only, not {module}"


@pytest.mark.parametrize("name", sorted(TOP_LEVEL))
def test_top_level_modules_import_no_layer(name: str):
    """errors, validation and units sit under every layer, so they may not reach into one."""
    for module in imports(PACKAGE / f"{name}.py"):
        assert layer_of(module) in TOP_LEVEL, f"inspector/{name}.py imports {module}: top-level modules use no layer"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_small_and_say_what_they_do(path: Path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: split it (one job per module)"
    if path.name != "__init__.py" or text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(PACKAGE)} has no docstring stating its contract"
