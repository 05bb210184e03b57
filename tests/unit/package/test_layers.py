"""The package layout is the design: each folder of inspector/ is one layer, and imports run one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.support.imports import all_imports


PACKAGE = Path(__file__).resolve().parents[3] / "inspector"
# layer -> the layers its modules may import (besides itself and the top-level modules of `inspector`:
# errors, input validation, units, which import no layer)
ALLOWED = {
    "engine": set(),  # torch only: ids in, logits and traces out; knows no text, no session, no UI
    "arch": {"engine"},  # inspector/engine/arch: the model families, part of the engine
    "models": {"engine"},  # where weights and tokenizers come from
    "generation": {"engine", "models"},  # the one generation loop: Sequence, step, the three levers
    "session": {"engine", "models", "generation"},  # generation state and records over the engine
    "serving": {"engine", "models", "generation"},  # paged cache, scheduler, memory calculator, roofline
    "speculative": {"engine", "models", "generation", "session"},  # drafters and the verifier
    "quant": {"engine", "models", "generation", "session"},  # quantized weights and KV, fidelity against fp32
    "analysis": {"engine", "models", "generation", "session"},  # patching, attribution, branch comparison
    "viz": {"session", "serving", "speculative", "quant", "generation", "analysis"},  # records -> figures (`records` modules only, below)
    "space": set(),  # the Space bundle and its upload
    "commands": {"engine", "models", "generation", "session", "serving", "space", "speculative", "quant", "analysis",
                 "api"},  # the CLI, over the Python API
    # the web app talks to sessions, labs and analyses, which own the model: no engine, no generation loop
    "ui": {"models", "session", "serving", "viz", "speculative", "quant", "analysis"},
    # the Python API: the page's builders (viz), never ui, never the CLI (commands/ is a door over api/)
    "api": {"engine", "models", "generation", "session", "serving", "speculative", "quant", "analysis", "viz"},
}
# inspector/ui/views and inspector/ui/labs: the page's panels, part of the web app
ALLOWED["views"] = ALLOWED["labs"] = ALLOWED["ui"] | {"ui"}
MAX_LINES = 400
# each layer's plain data for the views (dataclasses and tables, no torch): all that viz reads of the layers
PLAIN_DATA = {"inspector.session.records", "inspector.generation.finish", "inspector.generation.beam_tree",
              "inspector.serving.results", "inspector.speculative.rounds", "inspector.quant.measurements",
              "inspector.analysis.findings", "inspector.analysis.head_findings"}


TOP_LEVEL = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}  # importable by every layer


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "inspector" else None


def imports(path: Path) -> set[str]:
    """The `inspector` modules (and `module.name` of each from-import) a file imports."""
    return {m for m in all_imports(path, with_names=True) if m == "inspector" or m.startswith("inspector.")}


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
        if layer == "viz":  # plain data only (a layer's module of dataclasses for the views, no torch)
            assert module.rpartition(".")[0] in PLAIN_DATA or module in PLAIN_DATA, \
                f"viz reads plain data only, not {module}"


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


def test_the_page_does_no_tensor_math():
    """inspector/ui/ reaches tensors only through sessions, labs and analyses: no module of it imports torch,
    but the model thread's, which pins each thread's torch thread count."""
    ui = PACKAGE / "ui"
    importing = sorted(str(p.relative_to(ui)) for p in ui.rglob("*.py")
                       if any(m == "torch" or m.startswith("torch.") for m in all_imports(p)))
    assert importing == ["model_thread.py"]


# Where no module imports a module that imports it back (directly or through others): the whole package.
CYCLE_FREE = ("inspector",)


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of the tree but those under `if TYPE_CHECKING:` (imports for type hints only never run)."""
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for n in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if id(n) not in skip]


def module_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports (at any depth of its code; with
    `type_only`, those under `if TYPE_CHECKING:` too)."""
    names = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in names.items():
        found = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in (ast.walk(tree) if type_only else runtime_nodes(tree)):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # a name may be a module
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                          for a in node.names}
        graph[name] = {m for m in found if m in names and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_circle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = [c for c in cycles(module_graph()) if any(m.startswith(f"{layer}.") for m in c for layer in CYCLE_FREE)]
    assert not found, f"import circles: {found}"


# Where not even imports for type hints only (`if TYPE_CHECKING:`) go round in a circle.
TYPE_CYCLE_FREE = ("inspector",)


def test_no_import_cycles_counting_type_only_imports():
    graph = module_graph(type_only=True)
    found = [c for c in cycles(graph) if any(m.startswith(f"{pkg}.") for m in c for pkg in TYPE_CYCLE_FREE)]
    assert not found, f"import circles through type-only imports: {found}"


def test_no_two_engine_modules_share_a_name():
    """One name per concept in the engine: no two of its modules (at any depth) share a file name, so
    `attention` or `linear` means one thing there."""
    stems: dict[str, list[str]] = {}
    for path in (PACKAGE / "engine").rglob("*.py"):
        if path.name != "__init__.py":
            stems.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert not {s: p for s, p in stems.items() if len(p) > 1}


def test_one_class_per_name_and_one_records_module():
    """One meaning per noun: no two public classes of the package share a name (the scheduler's `Request`
    is not the generation's `Sequence`, the engine's `SpeculativeDecoder` not the API's `SpeculativeRun`),
    and `records` names one module, the session's (each layer's plain data is named by what it holds). A
    `Protocol` may take the name of the class it describes: it is that class, as one module reads it."""
    where: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and not any(
                    ast.unparse(base).rpartition(".")[2] == "Protocol" for base in node.bases):
                where.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert not {name: paths for name, paths in where.items() if len(paths) > 1}
    assert sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("records*.py")) == ["session/records.py"]


def test_a_dense_block_reads_top_down_in_one_module():
    """A Llama block's code is one module in the order the data flows: the block (the residual stream), then
    the norm, RoPE, attention and MLP it runs; the model's forward imports it from there."""
    tree = ast.parse((PACKAGE / "engine" / "layers.py").read_text(encoding="utf-8"))
    line = {n.name: n.lineno for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    order = ["Block", "RMSNorm", "apply_rope", "Attention", "MLP"]
    assert all(name in line for name in order), sorted(line)
    assert sorted(order, key=line.get) == order
    assert "inspector.engine.layers" in all_imports(PACKAGE / "engine" / "model.py")
