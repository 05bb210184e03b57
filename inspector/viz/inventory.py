"""Tensor inventory view: every weight tensor (name, shape, dtype, params, bytes, group, precision), totals per group.

The precision column says how a tensor is held: its dtype, or for a quantized model's entries the scheme
("int8 per-channel", "int4 g32 (bf16 scale+min)"), their bytes being what the packed form holds.

Input rows are the entries of `inspector.models.inventory` (objects or dicts with name/shape/dtype/params/
bytes/group). A mixture of experts' weights are grouped apart (router; expert gate / up / down, or Granite's
stacked gate+up / down): the totals table adds the experts' subtotal and what share of the weights they are,
and the note says that memory holds every expert while a decode step reads only the chosen ones. The table
is plain HTML, sorted client-side by static/app.js (click a header); rows of
the selected layer are highlighted.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from inspector.units import format_bytes
from inspector.viz.common import esc

CAPTION = ("Tensor inventory: every weight tensor the model holds (a tied LM head is the embedding matrix, "
           "listed and counted once); bytes per tensor exact, totals in binary units (MiB = 2²⁰ bytes). A forward "
           "reads each weight once (an untied embedding: only its tokens' rows; a mixture of experts: its shared "
           "weights and only the experts its tokens were routed to), a decode step doing 2 FLOPs per weight read: "
           "too few per byte to keep the processor busy, so decoding one token at a time waits on memory bandwidth "
           "(the tour's weights step and the Timing view's roofline show it). Click a column header to sort.")
EXPERT_PREFIX = "expert "  # the groups holding experts' weights (inspector.models.inventory.EXPERT_GROUPS)

FIELDS = ("name", "shape", "dtype", "params", "bytes", "group", "precision")


def _get(entry, key: str):
    return entry[key] if isinstance(entry, dict) else getattr(entry, key)


def precision_of(entry) -> str:
    """The precision column: how the tensor is held (an entry's `precision`, else its dtype)."""
    p = entry.get("precision") if isinstance(entry, dict) else getattr(entry, "precision", "")
    return str(p or _get(entry, "dtype"))


def layer_of(name: str) -> int | None:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def group_totals(entries) -> "OrderedDict[str, dict]":
    """Per group: tensor count, parameters, bytes (in first-seen order)."""
    out: OrderedDict[str, dict] = OrderedDict()
    for e in entries:
        g = out.setdefault(str(_get(e, "group")), {"tensors": 0, "params": 0, "bytes": 0})
        g["tensors"] += 1
        g["params"] += int(_get(e, "params"))
        g["bytes"] += int(_get(e, "bytes"))
    return out


def inventory_html(entries, tied: bool, layer: int | None = None) -> str:
    """The sortable table, a totals table per group, and the tied LM head note."""
    rows = []
    for e in entries:
        name = str(_get(e, "name"))
        hit = layer is not None and layer_of(name) == layer
        shape = "×".join(str(d) for d in _get(e, "shape"))
        p, b = int(_get(e, "params")), int(_get(e, "bytes"))
        rows.append(
            f'<tr class="{"ii-hit" if hit else ""}" data-layer="{layer_of(name) if layer_of(name) is not None else ""}">'
            f"<td>{esc(name)}</td><td>{esc(shape)}</td><td>{esc(_get(e, 'dtype'))}</td>"
            f'<td data-v="{p}">{p:,}</td><td data-v="{b}">{b:,}</td><td>{esc(_get(e, "group"))}</td>'
            f"<td>{esc(precision_of(e))}</td></tr>"
        )
    totals = group_totals(entries)
    all_p = sum(g["params"] for g in totals.values())
    all_b = sum(g["bytes"] for g in totals.values())
    trows = "".join(f"<tr><td>{esc(k)}</td><td>{g['tensors']}</td><td>{g['params']:,}</td>"
                    f"<td>{format_bytes(g['bytes'])}</td></tr>" for k, g in totals.items())
    experts = {k: g for k, g in totals.items() if k.startswith(EXPERT_PREFIX)}
    if experts:
        ep, eb = sum(g["params"] for g in experts.values()), sum(g["bytes"] for g in experts.values())
        trows += (f'<tr class="ii-experts"><td>all experts</td><td>{sum(g["tensors"] for g in experts.values())}</td>'
                  f"<td>{ep:,} ({ep / max(all_p, 1):.0%})</td><td>{format_bytes(eb)}</td></tr>")
    trows += (f'<tr class="ii-total"><td>total</td><td id="inventory-count">{len(rows)}</td>'
              f"<td>{all_p:,}</td><td>{format_bytes(all_b)}</td></tr>")
    tied_note = ("The LM head is <b>tied</b> to the token embedding: the same matrix turns token ids into "
                 "vectors at the input and vectors into logits at the output, so there is no separate "
                 "<code>lm_head.weight</code>." if tied else
                 "The LM head has its own weight (<code>lm_head.weight</code>), separate from the embedding.")
    if experts:
        tied_note += (" Expert weights (the <i>expert</i> groups) are a mixture of experts': memory holds every "
                      "expert, but a decode step reads only the few each layer's router chose for its token, "
                      "plus the shared weights (attention, routers, norms and the LM head; of an untied embedding "
                      "only its token's row).")
    sel = f" · layer {layer} highlighted" if layer is not None else ""
    return (
        f'<div class="ii-caption">{tied_note}</div>'
        f'<table class="ii-table ii-totals"><thead><tr><th>group</th><th>tensors</th><th>params</th>'
        f"<th>bytes</th></tr></thead><tbody>{trows}</tbody></table>"
        f'<div class="ii-caption">{len(rows)} tensors{sel}</div>'
        f'<div class="ii-scroll"><table id="inventory-table" class="ii-table ii-sortable"><thead><tr>'
        + "".join(f'<th data-col="{i}" data-num="{int(f in ("params", "bytes"))}">{f}</th>' for i, f in enumerate(FIELDS))
        + f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
