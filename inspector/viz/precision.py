"""One-line precision notes: what "fp32" means when the weights came from a quantized file.

A GGUF file's type ("Q4_1", "Q4_K_M") names its main precision, not every tensor's: llama.cpp keeps some
tensors (often the token embedding, always the norms) at others. So the notes read the file's tensor types
when the conversion recorded them (`LoadedModel.source_types`: {HF name: [GGUF type, parameters]}):
- `source_mix(types)`: per role (token embedding, LM head, block matrices, norms, biases), the GGUF types
  and their share of the parameters;
- `precision_note(source_format, dtype, types=None)`: the note the header, the Tensor inventory and the tour
  show;
- `quant_lab_note(source_format, types=None)`: the Quantization lab's (what int4-g32's KL measures when the
  file's matrices already sit on its grid).
Without the types (a conversion cached before they were recorded) the notes say only what the file type
tells. Pure string functions; "" for weights that never came from a quantized GGUF.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# GGUF types whose values int4 with groups of 32 reproduces almost exactly: 4 bits with an fp16 scale and
# minimum per 32 weights, the layout of `inspector.quant.packing.quantize_int4`. (Q4_0 is symmetric and
# Q4_K's per-32 scales and minimums are themselves 6-bit and fitted: re-quantizing them moves the weights.)
SAME_GRID_INT4_G32 = ("Q4_1",)
FLOAT_FILES = ("F32", "F16", "BF16")  # GGUF file types of float weights: nothing to say
ROLES = ("token embedding", "LM head", "block matrices", "norms", "biases")


def role(name: str) -> str:
    """The role of an HF tensor name: "token embedding", "LM head", "norms", "biases" or "block matrices"."""
    if name == "model.embed_tokens.weight":
        return "token embedding"
    if name == "lm_head.weight":
        return "LM head"
    if name.endswith(".bias"):
        return "biases"
    module = name.rsplit(".", 2)[-2] if "." in name else name  # "input_layernorm" of "...input_layernorm.weight"
    return "norms" if "norm" in module else "block matrices"


def source_mix(types: Mapping[str, Sequence]) -> list[tuple[str, list[tuple[str, int, float]]]]:
    """[(role, [(GGUF type, parameters, share of all parameters), ...]), ...] in ROLES order, the types of a
    role by parameters, largest first."""
    total = sum(int(n) for _, n in types.values()) or 1
    by_role: dict[str, dict[str, int]] = {}
    for name, (kind, n) in types.items():
        counts = by_role.setdefault(role(name), {})
        counts[kind] = counts.get(kind, 0) + int(n)
    return [(r, [(k, n, n / total) for k, n in sorted(by_role[r].items(), key=lambda kv: -kv[1])])
            for r in ROLES if r in by_role]


def _share(x: float) -> str:
    """A share of the parameters: "21.0%", or two significant digits under 1% ("0.026%")."""
    return f"{x:.1%}" if x >= 0.01 else f"{x * 100:.2g}%"


def _role_label(r: str, types: Mapping[str, Sequence]) -> str:
    tied = r == "token embedding" and "lm_head.weight" not in types
    return "token embedding, also the LM head" if tied else r


def mix_text(types: Mapping[str, Sequence]) -> str:
    """E.g. "token embedding, also the LM head: Q8_0 21.0%; block matrices: Q4_1 78.9%; norms: F32 0.026%"."""
    return "; ".join(f"{_role_label(r, types)}: " + ", ".join(f"{k} {_share(s)}" for k, _, s in kinds)
                     for r, kinds in source_mix(types))


def _file_type(source_format: str) -> str | None:
    """"GGUF Q4_1" -> "Q4_1"; None unless the weights came from a GGUF (a note may follow a comma)."""
    head = source_format.split(",", 1)[0].strip()
    if not head.upper().startswith("GGUF"):
        return None
    kind = head.split(maxsplit=1)[1] if " " in head else "GGUF"
    return None if kind.upper() in FLOAT_FILES else kind


def precision_note(source_format: str, dtype: str, types: Mapping[str, Sequence] | None = None) -> str:
    """E.g. 'Precision: the weights were dequantized from a Q4_1 GGUF, so "float32" here means that file's
    rounded values held in float32, not the original training weights. By parameters: token embedding ...'"""
    kind = _file_type(source_format)
    if kind is None:
        return ""
    note = (f'Precision: the weights were dequantized from a {kind} GGUF, so "{dtype}" here means that file\'s '
            f"rounded values held in {dtype}, not the original training weights.")
    if types:
        return f"{note} By parameters, as the file stores them: {mix_text(types)}."
    return (f"{note} {kind} is the file's type as llama.cpp records it, a recipe that keeps some tensors (always "
            "the norms, often the token embedding and some matrices) at other precisions.")


def quant_lab_note(source_format: str, types: Mapping[str, Sequence] | None = None) -> str:
    """The Quantization lab's note: its fp32 reference is already rounded, and where the file's matrices already
    sit on int4-g32's grid, int4-g32's KL measures the other tensors (and the kernel's bf16 activations)."""
    kind = _file_type(source_format)
    if kind is None:
        return ""
    base = (f'Note: the reference "fp32" model holds the rounded values of a {kind} GGUF, not the original '
            "training weights, so a scheme compared with it re-rounds weights that were rounded once already.")
    if not types:
        return base
    total = sum(int(n) for _, n in types.values()) or 1
    matrices = {n: t for n, t in types.items() if role(n) not in ("norms", "biases")}
    same = sum(int(n) for k, n in matrices.values() if k in SAME_GRID_INT4_G32)
    if not same:
        return f"{base} By parameters, as the file stores them: {mix_text(types)}."
    others = [(_role_label(role(name), types), k, int(n)) for name, (k, n) in matrices.items()
              if k not in SAME_GRID_INT4_G32]
    rest: dict[tuple[str, str], int] = {}
    for label, k, n in others:
        rest[(label, k)] = rest.get((label, k), 0) + n
    rest_text = "; ".join(f"{label}: {k}, {_share(n / total)} of the parameters" for (label, k), n in
                          sorted(rest.items(), key=lambda kv: -kv[1]))
    grid = ", ".join(SAME_GRID_INT4_G32)
    what = (f"what the file holds at other precisions, which int4 rounds anew ({rest_text}), and "
            if rest else "")
    return (f"{base} int4-g32 puts the {grid} matrices ({_share(same / total)} of the parameters) back on almost "
            f"the grid they already had ({grid} also stores 4 bits with a scale and minimum per 32 weights), so "
            f"its KL against fp32 here measures mostly {what}the int4 kernel's bf16 activations (where that kernel "
            "runs); against the original weights every matrix would be rounded for the first time.")
