"""Assemble the folder that becomes a Hugging Face Space, from the source checkout (one source of truth).

`build_bundle(dest)` copies, from the project root (the folder holding `inspector/`):

    inspector/            the package, as is (no caches)      -> inspector/
    app.py                the Gradio entry point Spaces runs  -> app.py
    static/               assets the app serves (if any)      -> static/
    spaces/README.md      Spaces front matter + description   -> README.md
    spaces/requirements.txt                                   -> requirements.txt

Nothing else (tests, benches, docs) goes in, and nothing in the repository is a copy of these files. The
Space installs `requirements.txt` and runs `python app.py` in that folder, so `inspector` imports from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import inspector
from inspector.errors import InspectorError

# (path in the source checkout, path in the bundle); directories are copied whole.
OPTIONAL = ("static",)  # git keeps no empty folders: a fresh clone may have no static/ yet
BUNDLE_LAYOUT: tuple[tuple[str, str], ...] = (
    ("inspector", "inspector"),
    ("app.py", "app.py"),
    ("static", "static"),
    ("spaces/README.md", "README.md"),
    ("spaces/requirements.txt", "requirements.txt"),
)
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.egg-info", ".DS_Store")


class SpaceBuildError(InspectorError):
    """The bundle cannot be built (not a source checkout, a missing file, a destination in the way)."""


def source_root() -> Path:
    """The project root this `inspector` package was imported from (a checkout or an editable install)."""
    return Path(inspector.__file__).resolve().parent.parent


def build_bundle(dest: str | Path, *, root: str | Path | None = None, overwrite: bool = False) -> list[str]:
    """Write the Space folder to `dest`; returns the bundle's files (relative POSIX paths, sorted).

    `dest` must be absent or empty unless `overwrite`, which first deletes it (never the source tree)."""
    root = Path(root).resolve() if root is not None else source_root()
    dest = Path(dest).resolve()
    missing = [src for src, _ in BUNDLE_LAYOUT if not (root / src).exists() and src not in OPTIONAL]
    if missing:
        raise SpaceBuildError(f"{root} is not a complete source checkout (missing: {', '.join(missing)}); "
                              "run `inspector space build` from a clone of the project")
    sources = [root / src for src, _ in BUNDLE_LAYOUT]
    if any(s.is_relative_to(dest) or dest.is_relative_to(s) for s in sources):
        raise SpaceBuildError(f"refusing to build into {dest}: it overlaps the source tree")
    if dest.exists():
        if not dest.is_dir():
            raise SpaceBuildError(f"{dest} exists and is not a directory")
        if any(dest.iterdir()):
            if not overwrite:
                raise SpaceBuildError(f"{dest} is not empty; pick a new folder or pass --overwrite")
            shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for src, dst in BUNDLE_LAYOUT:
        if not (root / src).exists():
            continue
        if (root / src).is_dir():
            shutil.copytree(root / src, dest / dst, ignore=IGNORED)
        else:
            shutil.copy2(root / src, dest / dst)
    return bundle_files(dest)


def bundle_files(folder: str | Path) -> list[str]:
    """Every file under `folder`, as sorted relative POSIX paths (what an upload of it would send)."""
    folder = Path(folder)
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
