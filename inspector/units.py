"""Byte counts as people read them: one convention for the whole app, CLI and benchmarks.

Binary units, labelled as such (IEC): 1 KiB = 1024 B, 1 MiB = 1024 KiB, 1 GiB = 1024 MiB, 1 TiB = 1024 GiB.
What this project sizes is memory: weights held in RAM, the KV cache, a session's trace, a GPU's capacity.
Memory comes in powers of two, and the tools a reader checks our numbers against count it that way
(`free -h`, `ls -lh`, nvidia-smi's MiB, torch's allocator statistics; the serving lab's GPUs in GiB). The
labels say "KiB", never "KB", so no number reads as both conventions. (File sizes on the Hugging Face Hub
and PyPI are quoted in decimal MB: a 538.1 MB safetensors file is 513.2 MiB here.) Rates stay decimal,
GB/s and GFLOP/s, as hardware bandwidth and compute peaks are specified and measured.

`format_bytes(n)`: whole bytes below 1 KiB ("512 B"), else one decimal in the largest unit that keeps the
number at 1 or above ("513.2 MiB"); TiB is the largest unit. Negative counts (a difference) keep the sign.
"""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40

_UNITS = (("KiB", KIB), ("MiB", MIB), ("GiB", GIB), ("TiB", TIB))


def format_bytes(n: float) -> str:
    """538_090_408 -> "513.2 MiB"; 512 -> "512 B"; 80 * 2**30 -> "80.0 GiB"."""
    sign, size = ("-" if n < 0 else ""), abs(n)
    if round(size) < KIB:
        return f"{sign}{round(size)} B"
    # the smallest unit whose rounded value stays under 1024: 1_048_575 B is "1.0 MiB", not "1024.0 KiB"
    unit, scale = next(((u, s) for u, s in _UNITS[:-1] if round(size / s, 1) < 1024), _UNITS[-1])
    return f"{sign}{size / scale:,.1f} {unit}"
