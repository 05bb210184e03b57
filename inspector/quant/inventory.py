"""The tensor inventory of a quantized model: every weight with the bytes it actually holds and its precision.

`quant_inventory(model, fp32_inventory) -> Inventory`: the fp32 model's inventory (`inspector.models.inventory`)
with each quantized matrix's entry replaced: dtype = the storage dtype of its values ("int8", "uint8" for
packed int4 pairs, "bfloat16"), bytes = values plus scales (plus zeros), precision = the module's label.
Shared fp32 tensors (norms, biases) keep their entries, marked "fp32 (shared)". A tied int4 model's
kernel-layout LM head copy gets an entry of its own ("lm_head.weight", group lm_head).
"""

from __future__ import annotations

from dataclasses import replace

from inspector.models.inventory import GROUPS, GroupTotal, Inventory, TensorEntry
from inspector.quant.model import QuantTransformer


def quant_inventory(model: QuantTransformer, fp32: Inventory) -> Inventory:
    modules = model.quant_modules()
    entries = []
    for e in fp32.entries:
        m = modules.get(e.name)
        if m is None:
            entries.append(replace(e, precision="fp32 (shared)"))
            continue
        held = [b for b in m.buffers(recurse=False)]
        entries.append(replace(e, dtype=str(held[0].dtype).removeprefix("torch."), precision=m.precision,
                               bytes=sum(b.numel() * b.element_size() for b in held)))
    extra = [(n, m) for n, m in modules.items() if "tied" in n]
    for _, m in extra:
        held = [b for b in m.buffers(recurse=False)]
        entries.append(TensorEntry("lm_head.weight", (m.out_features, m.in_features), str(held[0].dtype).removeprefix("torch."),
                                   m.out_features * m.in_features, sum(b.numel() * b.element_size() for b in held),
                                   "lm_head", None, m.precision + ", the tied head in the kernel's layout"))
    groups = []
    for g in GROUPS:
        members = [e for e in entries if e.group == g]
        if members or any(x.group == g for x in fp32.groups):
            groups.append(GroupTotal(g, len(members), sum(e.params for e in members), sum(e.bytes for e in members)))
    tied = fp32.tied_to if not extra else None
    return Inventory(tuple(entries), tuple(groups), fp32.params, sum(e.bytes for e in entries), tied,
                     fp32.source_format, fp32.source_bytes)
