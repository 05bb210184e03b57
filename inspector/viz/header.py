"""Model header and status line: plain HTML strings from model facts and timing stats.

Every figure on them carries a tooltip saying what it counts (TTFT and TPOT as `inspector.viz.timing` sums
them, tok/s from the median TPOT, parameters with a tied LM head counted once, sizes in binary units).
"""

from __future__ import annotations

from inspector.generation.finish import finish_label
from inspector.units import format_bytes
from inspector.viz.common import esc


def _title(tip: str) -> str:
    """A tooltip attribute (nothing for an empty tip)."""
    return f' title="{esc(tip)}"' if tip else ""


def model_header_html(name: str, params: int, dtype: str, cfg, weight_bytes: int, source_format: str = "",
                      source_bytes: int = 0, precision: str = "") -> str:
    """Name, parameters, dtype, layers, heads / KV heads, head_dim, context, weight memory; `precision`: a
    one-line note on what the dtype holds (`inspector.viz.precision`)."""
    src = f" · source {esc(source_format)} ({format_bytes(source_bytes)})" if source_format else ""
    if precision:
        # the first sentence in the header (it stays one line on the first screen); the tensor-by-tensor mix of
        # the file's types on hover, and in full in the Tensor inventory's caption
        first, _, rest = precision.partition(". ")
        tip = f' title="{esc(precision)}"' if rest else ""
        src += f' · <span id="precision-note"{tip}>{esc(first + ("." if rest else ""))}</span>'
    items = [
        ("parameters", f"{params / 1e6:,.1f} M", "numbers in every weight tensor (M = 10⁶); a tied LM head is the "
                                                 "embedding matrix, counted once"),
        ("dtype", dtype, "how each weight is held in memory"), ("layers", cfg.num_hidden_layers, ""),
        ("heads / KV heads", f"{cfg.num_attention_heads} / {cfg.num_key_value_heads}",
         "query heads / key-value heads per layer (fewer KV heads: grouped-query attention)"),
        ("head_dim", cfg.head_dim, "numbers per head's query, key and value"),
        ("hidden", cfg.hidden_size, "numbers per position in the residual stream"),
        ("context", f"{cfg.max_position_embeddings:,}", "positions the model was configured for (prompt + output)"),
        ("vocab", f"{cfg.vocab_size:,}", "token ids the model knows"),
        ("weights in memory", format_bytes(weight_bytes), "bytes of every weight tensor (binary units: 1 MiB = "
                                                          "2²⁰ bytes)"),
    ]
    facts = "".join(f'<span class="ii-fact"{_title(tip)}><small>{esc(k)}</small> {esc(v)}</span>'
                    for k, v, tip in items)
    return (f'<div id="model-header" class="ii-header"><span class="ii-title">Inference Inspector</span>'
            f'<span class="ii-model">{esc(name)}</span>{facts}<small class="ii-muted">{src}</small></div>')


TTFT_TIP = "time to first token: tokenizing the prompt + the prefill forward + the first draw"
TPOT_TIP = "time per output token: the newest decode step's forward + draw"
TOK_S_TIP = "decode tokens per second: 1000 ÷ the median TPOT in ms (the page's drawing not included)"


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
        mem = (f' · <span id="status-memory" data-bytes="{used}" title="what this session holds: its KV cache\'s '
               f'allocated storage + the recorded trace, against the cap per session on this server">session '
               f'{format_bytes(used)} of {format_bytes(cap)}</span>')
    msg = (f' · <span id="status-message" class="{"ii-error" if error else "ii-note"}">{esc(message)}</span>'
           if message else "")
    return (f'<div id="status-line" class="ii-status" data-phase="{esc(phase)}">'
            f'<b id="status-phase">{esc(phase)}</b> · <span title="{TTFT_TIP}">TTFT <span id="status-ttft">'
            f'{ms(stats.get("ttft_ms"))}</span></span> · <span title="{TPOT_TIP}">last TPOT '
            f'{ms(stats.get("last_tpot_ms"))}</span> · <span title="{TOK_S_TIP}">{tok_s} tok/s</span>{mem}{msg}</div>')
