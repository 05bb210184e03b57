"""Model header and status line: plain HTML strings from model facts and timing stats."""

from __future__ import annotations

from inspector.generation.records import finish_label
from inspector.units import format_bytes
from inspector.viz.common import esc


def model_header_html(name: str, params: int, dtype: str, cfg, weight_bytes: int, source_format: str = "",
                      source_bytes: int = 0, precision: str = "") -> str:
    """Name, parameters, dtype, layers, heads / KV heads, head_dim, context, weight memory; `precision`: a
    one-line note on what the dtype holds (`inspector.viz.precision`)."""
    src = f" · source {esc(source_format)} ({format_bytes(source_bytes)})" if source_format else ""
    if precision:
        src += f' · <span id="precision-note">{esc(precision)}</span>'
    items = [
        ("parameters", f"{params / 1e6:,.1f} M"), ("dtype", dtype), ("layers", cfg.num_hidden_layers),
        ("heads / KV heads", f"{cfg.num_attention_heads} / {cfg.num_key_value_heads}"),
        ("head_dim", cfg.head_dim), ("hidden", cfg.hidden_size), ("context", f"{cfg.max_position_embeddings:,}"),
        ("vocab", f"{cfg.vocab_size:,}"), ("weights in memory", format_bytes(weight_bytes)),
    ]
    facts = "".join(f'<span class="ii-fact"><small>{esc(k)}</small> {esc(v)}</span>' for k, v in items)
    return (f'<div id="model-header" class="ii-header"><span class="ii-title">Inference Inspector</span>'
            f'<span class="ii-model">{esc(name)}</span>{facts}<small class="ii-muted">{src}</small></div>')


def phase_text(n_records: int, n_generated: int, max_new: int, finished: str | None, playing: bool) -> str:
    """idle / prefill done / decode step k of n / finished: EOS, max tokens, context full."""
    if n_records == 0:
        return "idle"
    if finished:
        return f"finished: {finish_label(finished)}"
    if n_records == 1:
        return "prefill done" + (" · playing" if playing else "")
    return f"decode step {n_records - 1} (token {n_generated} of {max_new})" + (" · playing" if playing else "")


def status_html(phase: str, stats: dict, message: str = "", error: bool = False,
                memory: tuple[int, int] | None = None) -> str:
    """One line: phase, TTFT, last TPOT, tokens/s, the session's memory of its cap, and a message (errors in
    red). `memory` = (bytes this session holds, cap in bytes)."""
    def ms(v):
        return f"{v:.0f} ms" if v is not None else "—"

    tok_s = f"{stats['tok_s']:.1f}" if stats.get("tok_s") else "—"
    mem = ""
    if memory is not None:
        used, cap = memory
        mem = (f' · <span id="status-memory" data-bytes="{used}" title="KV cache + recorded trace of this session,'
               f' and the cap per session on this server">session {format_bytes(used)} of {format_bytes(cap)}</span>')
    msg = (f' · <span id="status-message" class="{"ii-error" if error else "ii-note"}">{esc(message)}</span>'
           if message else "")
    return (f'<div id="status-line" class="ii-status" data-phase="{esc(phase)}">'
            f'<b id="status-phase">{esc(phase)}</b> · TTFT <span id="status-ttft">{ms(stats.get("ttft_ms"))}</span>'
            f' · last TPOT {ms(stats.get("last_tpot_ms"))} · {tok_s} tok/s{mem}{msg}</div>')
