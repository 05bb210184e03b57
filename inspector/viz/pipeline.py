"""The pipeline strip: the stages of one step, each with this step's live figure and a link to its view.

text → tokens → embeddings → N layers (attention + MLP) → final norm → logits → sampling → token → text
piece. `pipeline_html(record, facts)` is a pure function of the newest `ForwardRecord` and a few model
facts; it returns one HTML string. A prefill (all prompt tokens in one forward) and a decode step (one
token at the next position) are drawn differently: the strip's class, its label and the numbers at each
stage say which it is. A stage's `data-tab` names the view tab that shows it, the registry of views' title
(`inspector.viz.registry`; static/app.js opens it).
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.session.records import ForwardRecord
from inspector.viz import registry as views
from inspector.viz.common import esc, show_piece

EMPTY = ('<div id="pipeline-strip" class="ii-pipeline ii-pipe-idle" data-kind="idle">'
         '<span class="ii-pipe-label">pipeline</span> text → tokens → embeddings → layers → final norm → '
         'logits → sampling → token → text · press Prefill to run it</div>')


@dataclass(frozen=True)
class ModelFacts:
    """The model numbers the strip names (from its config)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int


def _tab(view_key: str) -> str:
    """The tab label of a registered view (`inspector.viz.registry`), which static/app.js opens."""
    return views.VIEWS[view_key].title


def _stage(key: str, name: str, figure: str, tab: str | None, title: str) -> str:
    link = f' data-tab="{esc(tab)}" role="link" tabindex="0"' if tab else ""
    return (f'<span class="ii-pipe-stage" data-stage="{key}"{link} title="{esc(title)}">'
            f'<b>{esc(name)}</b><small>{figure}</small></span>')


def pipeline_html(rec: ForwardRecord | None, facts: ModelFacts, new_piece: str = "") -> str:
    """The strip for the newest forward `rec` (None: before the first prefill). `new_piece` is the text the
    sampled token added to the output (streamed detokenization; may be empty for a partial character)."""
    if rec is None:
        return EMPTY
    n, end = rec.n_new, rec.start_pos + rec.n_new
    prefill = rec.kind == "prefill"
    s = rec.sample
    if prefill:
        label = f"prefill · {n} tokens in one forward"
        text_fig = f"tokenized in {rec.tokenize_ms:.1f} ms" if rec.tokenize_ms else "the prompt"
        token_fig = f"{n} tokens · positions 0–{end - 1}"
    else:
        label = f"decode step {rec.step} · 1 token"
        text_fig = "the last token, fed back"
        token_fig = f"1 token · position {rec.start_pos}"
    kv_len = rec.kv[0].length if rec.kv else end
    norm = float(rec.resid_post[-1, -1]) if rec.resid_post.size else 0.0
    stages = [
        _stage("text", "text", esc(text_fig), None, "the input text (chips on the left)"),
        _stage("tokens", "tokens", esc(token_fig), None, "token ids the tokenizer produced"),
        _stage("embed", "embeddings", f"{n} × {facts.hidden_size}", _tab("residual"),
               "one vector per token from the embedding matrix"),
        _stage("layers", f"{facts.num_layers} layers", f"attention + MLP · {facts.num_heads} q / "
               f"{facts.num_kv_heads} kv heads", _tab("attention"),
               "each layer adds its attention output, then its MLP output, to the residual stream"),
        _stage("kv", "KV cache", f"{kv_len} positions ({'+' + str(n) if prefill else '+1'})", _tab("kv"),
               "keys and values written by this forward, read by every later one (on a local layer only while "
               "in its window; under an eviction policy only until evicted)"),
        _stage("norm", "final norm", f"‖x‖ {norm:.0f} → RMSNorm", _tab("residual"),
               "the newest position's residual after the last layer (its L2 norm ‖x‖), then RMS-normalised"),
        _stage("logits", "logits", f"{facts.vocab_size:,} logits", _tab("sampling"),
               "LM head: one score per vocabulary entry"),
    ]
    if s is not None:
        greedy = s.params.temperature == 0
        how = "greedy (argmax)" if greedy else f"{s.survivors:,} survive"
        chosen = next((c for c in s.candidates if c.id == s.token_id), None)
        # greedy's final distribution is one-hot: show the model's own probability of the token instead
        prob = None if chosen is None else chosen.prob_raw if greedy else chosen.prob_final
        p = f" · p {prob:.2f}" if prob is not None else ""
        chain = f"the processor chain: {', '.join(s.stages)}" if s.stages else "no processors"
        stages += [
            _stage("sampling", "sampling", esc(how), _tab("sampling"),
                   chain + ("; then the top token, no draw" if greedy else "; then a seeded draw")),
            _stage("token", "token", f"{esc(show_piece(s.token_piece, 12))} · id {s.token_id}{p}", _tab("sampling"),
                   "the token this step produced; p: the model's probability of it (softmax of the logits)" if greedy
                   else "the token this step produced; p: its probability in the distribution it was drawn from"),
            _stage("piece", "text piece", esc(show_piece(new_piece, 12)) if new_piece else "(waits for more bytes)",
                   None, "what the token added to the text (streamed)"),
        ]
    ms = f"{rec.forward_ms:.0f} ms forward + {rec.sample_ms:.1f} ms sample"
    arrow = '<span class="ii-pipe-arrow">→</span>'
    kind = rec.kind
    return (f'<div id="pipeline-strip" class="ii-pipeline ii-pipe-{kind}" data-kind="{kind}" data-step="{rec.step}"'
            f' data-tokens="{n}"><span class="ii-pipe-label">{esc(label)}</span>{arrow.join(stages)}'
            f'<span class="ii-pipe-time" data-tab="{esc(_tab("timing"))}" role="link" tabindex="0">{esc(ms)}</span>'
            '</div>')
