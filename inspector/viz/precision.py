"""One-line precision notes: what "fp32" means when the weights came from a quantized file.

`source_bits(source_format)` reads the bits per weight of a GGUF quantization name ("GGUF Q4_1" -> 4);
`precision_note(source_format, dtype)` is the note the header, the Tensor inventory and the tour show, and
`quant_lab_note(source_format)` the Quantization lab's. Pure string functions; "" when there is nothing to say
(weights that were never rounded below their dtype).
"""

from __future__ import annotations

import re

_QUANT = re.compile(r"\b(?:I?Q)(\d)(?:_\w+)?\b")


def source_bits(source_format: str) -> int | None:
    """Bits per weight of a quantized GGUF source ("GGUF Q4_1" -> 4, "GGUF Q8_0" -> 8); None for float sources."""
    if not source_format.upper().startswith("GGUF"):
        return None
    m = _QUANT.search(source_format.upper())
    return int(m.group(1)) if m else None


def precision_note(source_format: str, dtype: str) -> str:
    """E.g. 'Precision: the weights come from a Q4_1 GGUF, so "float32" here means 4-bit-rounded weights held
    in float32, not the original training weights.'"""
    bits = source_bits(source_format)
    if bits is None:
        return ""
    kind = source_format.split(maxsplit=1)[1] if " " in source_format else source_format
    return (f'Precision: the weights come from a {kind} GGUF, so "{dtype}" here means {bits}-bit-rounded weights '
            f"held in {dtype}, not the original training weights.")


def quant_lab_note(source_format: str) -> str:
    """The Quantization lab's note: its reference is already rounded, so low bits look better than they would."""
    bits = source_bits(source_format)
    if bits is None:
        return ""
    return (f"Note: the reference \"fp32\" model is itself {bits}-bit-rounded (its weights come from a "
            f"{source_format}), so int{bits} here compares against already-{bits}-bit-rounded weights and looks "
            "closer to it than it would to the original weights.")
