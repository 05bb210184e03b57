"""What a Python file imports, read from its syntax tree (the layering tests' and the tests' own layout test's
tool)."""

from __future__ import annotations

import ast
from pathlib import Path


def all_imports(path: Path, with_names: bool = False) -> set[str]:
    """Every module a file imports (any package, at any depth of the file); with `with_names` also
    `module.name` for each name of a from-import (the name may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if with_names:
                found |= {f"{node.module}.{a.name}" for a in node.names}
    return found
