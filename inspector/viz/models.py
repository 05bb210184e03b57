"""The Models tab's HTML: what the loaded model's family adds, and two models side by side.

- `family_html(card)`: the family's additions to a Llama block as a list, and a strip of its layers,
  local (sliding-window) ones light and global ones dark, with the window and each kind's RoPE base.
- `side_by_side_html(left, right)`: per model, its tokenization of the prompt (pieces, count) and its
  next-token distribution (top tokens with probability bars), the two in columns.
Pure functions of `inspector.session.records` dataclasses.
"""

from __future__ import annotations

from inspector.session.records import FamilyCard, NextTokens
from inspector.viz.common import ATTN, CHOSEN, PROMPT, esc, show_piece

LOCAL, GLOBAL = "#c7d2fe", ATTN


def family_html(card: FamilyCard) -> str:
    adds = "".join(f"<li>{esc(f)}</li>" for f in card.features) or "<li>nothing: the Llama block as it is</li>"
    cells = "".join(
        f'<span title="layer {i}: {kind}" data-kind="{kind}" style="display:inline-block;width:18px;height:18px;'
        f'margin:1px;background:{LOCAL if kind == "local" else GLOBAL}"></span>' for i, kind in enumerate(card.layer_kinds))
    n_local = card.layer_kinds.count("local")
    if n_local:
        legend = (f"{n_local} local layers (light: each query sees the {card.window:,} latest positions, RoPE base "
                  f"{card.rope_local_theta or card.rope_theta:g}) and {len(card.layer_kinds) - n_local} global "
                  f"(dark: every earlier position, RoPE base {card.rope_theta:g})")
    else:
        legend = f"{len(card.layer_kinds)} global layers (every earlier position, RoPE base {card.rope_theta:g})"
    cap = (f"<p>Final logits are soft-capped: {card.final_softcap:g} · tanh(logits / {card.final_softcap:g}) "
           "(trace points <code>unembed.hook_logits_raw</code> before, <code>unembed.hook_logits</code> after).</p>"
           if card.final_softcap else "")
    return (f'<div id="family-card"><p><b>{esc(card.model)}</b> · model_type <code>{esc(card.model_type)}</code>. '
            f"What its family adds to a Llama block:</p><ul>{adds}</ul>"
            f'<div id="layer-kinds">{cells}</div><p>{esc(legend)}</p>{cap}</div>')


def _column(n: NextTokens) -> str:
    chips = "".join(f'<span style="display:inline-block;border:1px solid {PROMPT};border-radius:3px;margin:1px;padding:0 2px;'
                    f'font-family:monospace" title="id {i}">{esc(show_piece(p))}</span>' for p, i in zip(n.pieces, n.ids))
    bars = "".join(
        f'<tr><td style="font-family:monospace">{esc(show_piece(t.piece))}</td><td>{t.prob:.1%}</td>'
        f'<td><div style="background:{CHOSEN};height:10px;width:{max(1, round(200 * t.prob))}px"></div></td></tr>'
        for t in n.top)
    return (f'<div class="side" data-model="{esc(n.model)}" data-tokens="{len(n.ids)}" style="flex:1;min-width:0">'
            f"<h4>{esc(n.model)}</h4><p>{len(n.ids)} tokens (prefill {n.forward_ms:.0f} ms)</p>"
            f'<div style="line-height:1.8">{chips}</div><p>Next token:</p><table>{bars}</table></div>')


def side_by_side_html(left: NextTokens, right: NextTokens) -> str:
    return f'<div id="side-by-side" style="display:flex;gap:24px">{_column(left)}{_column(right)}</div>'
