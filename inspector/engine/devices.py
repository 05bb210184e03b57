"""Where the model runs: `--device cpu|cuda|mps`.

`resolve_device(name) -> torch.device` accepts "cpu", "cuda" (or "cuda:N") and "mps"; a device this
machine does not have, or an unknown name, raises InputError in one line saying what is present
(`available_devices()`). The model's weights and its KV cache live on that device; everything the views
read (norm summaries, queries, logits, attention rows) is copied to the CPU by the recorders and the
trace store, so the views never see a device tensor.
"""

from __future__ import annotations

import torch

from inspector.errors import InputError

DEVICE_KINDS = ("cpu", "cuda", "mps")


def available_devices() -> list[str]:
    """The devices torch can use here, "cpu" first."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def resolve_device(name: str | torch.device | None) -> torch.device:
    """The torch.device for `name` (None: cpu); InputError when unknown or not present on this machine."""
    if name is None:
        return torch.device("cpu")
    text = str(name).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in DEVICE_KINDS or (index and (kind != "cuda" or not index.isdigit())):
        raise InputError(f"device must be one of {', '.join(DEVICE_KINDS)} (or cuda:N), got {str(name)!r}")
    present = available_devices()
    if text not in present:
        raise InputError(f"device {text} is not present on this machine (available: {', '.join(present)})")
    return torch.device(text)
