"""Speculative view: each round's drafts with q and p, what the verifier kept, the KV cache's write and
rollback, and the run's running numbers. Pure builders over `inspector.speculative.rounds` (no torch).

- `rounds_html(rounds, last)`: the newest rounds, one line each: the token fed first, the drafts (kept ones
  plain, the first rejected one struck through, the ones after it struck through in grey: never checked,
  since the full model saw them after a wrong token), then the corrected or bonus token.
- `kv_figure(rounds)`: per round, the k+1 entries the verify forward wrote and the ones kept after the
  rollback.
- `stats_html(stats)`: acceptance rate, tokens per full-model forward, draft cost, tokens/s of the run and
  of plain decoding of the same prompt and length, and the speedup.
"""

from __future__ import annotations

import plotly.graph_objects as go

from inspector.speculative.rounds import RoundRecord, SpecStats
from inspector.viz.common import CHOSEN, GENERATED, REMOVED, empty_figure, esc, figure, show_piece

CAPTION = ("Speculative decoding: a cheap drafter proposes k tokens; the full model checks all of them in ONE "
           "forward over k+1 positions. Greedy: a draft is kept while it equals the full model's argmax, the first "
           "one that does not is replaced by the argmax, and the output is the full model's own greedy text (up to "
           "float rounding: the forward over k+1 positions adds in another order than a one-token step, so a "
           "near-tie between the top two tokens could flip). Sampling: a draft is kept with probability "
           "min(1, p/q), and the first rejected one is replaced by a draw from norm(max(0, p − q)); every token "
           "then follows the full model's distribution, as plain sampling does, but it is not the text plain "
           "sampling draws with the same seed (the random numbers are spent differently). When all k are kept, a "
           "bonus token follows from the full model. The KV cache gets k+1 entries, then is cut back past the "
           "rejected ones. On a chip, q is the drafter's probability of that token and p the full model's at that "
           "position: with sampling, the two distributions the rule uses (both after temperature, top-k, top-p and "
           "min-p; p also after any penalty or constraint); with greedy, the plain softmax of each model's logits, "
           "shown for reference, since greedy compares argmaxes; a prompt-lookup draft has no distribution, so its "
           "q shows 1.00.")
KIND_LABEL = {"corrected": "corrected", "bonus": "bonus", "plain": "next (no drafts)", "none": "ended"}
REJECTED = "#ef4444"


def _chip(piece: str, cls: str, title: str, q: float | None, p: float) -> str:
    probs = f'<span class="ii-spec-qp">{"" if q is None else f"q {q:.2f} · "}p {p:.2f}</span>'
    said = ("" if q is None else f"; q {q:.2f}: the drafter's probability of it") + f"; p {p:.2f}: the full model's"
    return f'<span class="ii-spec-chip {cls}" title="{esc(title + said)}">{esc(show_piece(piece))}{probs}</span>'


def round_line(r: RoundRecord) -> str:
    """One round as a line of chips (see the module doc)."""
    fed = esc(show_piece(r.fed_piece))
    chips = [f'<span class="ii-spec-fed" title="fed first, at position {r.start_pos}">{fed} →</span>']
    for i, d in enumerate(r.drafts):
        if d.accepted:
            cls, title = "ii-spec-kept", "kept"
        elif i == r.accepted:
            cls, title = "ii-spec-rejected", "rejected by the full model"
        else:
            cls, title = "ii-spec-discarded", "discarded: it followed a rejected draft"
        chips.append(_chip(d.piece, cls, f"draft {i + 1}: {title}", d.q, d.p))
    if r.next_id is not None:
        title = f"{KIND_LABEL[r.next_kind]} token from the full model"
        chips.append(_chip(r.next_piece, f"ii-spec-{r.next_kind}", title, None, r.next_p))
    kind = KIND_LABEL[r.next_kind]
    return (f'<div class="ii-spec-round" data-round="{r.index}" data-drafted="{r.drafted}" '
            f'data-accepted="{r.accepted}" data-kind="{r.next_kind}">'
            f'<span class="ii-spec-label">round {r.index + 1}: {r.accepted}/{r.drafted} kept, {kind}</span> '
            + " ".join(chips) + "</div>")


def rounds_html(rounds: list[RoundRecord], last: int = 8) -> str:
    """The newest `last` rounds, newest first."""
    if not rounds:
        return '<div id="spec-rounds" data-rounds="0" class="ii-spec-empty">Start a run, then step a round.</div>'
    body = "".join(round_line(r) for r in reversed(rounds[-last:]))
    style = ("<style>.ii-spec-chip{display:inline-block;padding:1px 5px;margin:1px;border-radius:4px;"
             "font-family:monospace}.ii-spec-qp{font-size:10px;color:#6b7280;margin-left:4px}"
             f".ii-spec-kept{{background:#d1fae5}}.ii-spec-rejected{{text-decoration:line-through;"
             f"background:#fee2e2;color:{REJECTED}}}.ii-spec-discarded{{text-decoration:line-through;color:#9ca3af}}"
             ".ii-spec-corrected,.ii-spec-bonus,.ii-spec-plain{background:#ffedd5;font-weight:bold}"
             ".ii-spec-label{font-size:12px;color:#374151;margin-right:6px}.ii-spec-round{margin:3px 0}</style>")
    return f'<div id="spec-rounds" data-rounds="{len(rounds)}">{style}{body}</div>'


def kv_figure(rounds: list[RoundRecord], last: int = 40) -> go.Figure:
    """Per round: the cache length before, the k+1 entries written by the verify forward, those kept."""
    if not rounds:
        return empty_figure("The KV cache per round appears here")
    shown = rounds[-last:]
    x = [r.index + 1 for r in shown]
    before = [r.kv_before for r in shown]
    traces = [
        {"type": "bar", "x": x, "y": [r.kv_written - r.kv_before for r in shown], "base": before,
         "name": "written by the verify (k+1)", "marker": {"color": REMOVED},
         "hovertemplate": "round %{x}: wrote %{y} entries<extra></extra>"},
        {"type": "bar", "x": x, "y": [r.kv_after - r.kv_before for r in shown], "base": before,
         "name": "kept after the rollback", "marker": {"color": GENERATED},
         "hovertemplate": "round %{x}: kept %{y}<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "x": x, "y": [r.kv_after for r in shown],
         "name": "cache length", "line": {"color": CHOSEN}},
    ]
    lo = min(before)
    return figure(traces, "Target KV cache per round: k+1 entries written, then cut back", 300, barmode="overlay",
                  xaxis={"title": {"text": "round"}}, yaxis={"title": {"text": "positions"}, "range": [lo - 1, None]},
                  legend={"orientation": "h", "y": -0.25})


def stats_html(stats: SpecStats | None) -> str:
    """The running numbers of a run, with the plain-decode comparison once it was timed."""
    if stats is None or stats.rounds == 0:
        return '<div id="spec-stats" data-rounds="0">No rounds yet.</div>'
    plain = stats.plain
    speed = stats.speedup
    rows = [
        ("acceptance rate", f"{stats.acceptance_rate:.0%} ({stats.accepted} of {stats.drafted} drafts)"),
        ("tokens per full-model forward", f"{stats.tokens_per_forward:.2f} ({stats.tokens} tokens, "
                                          f"{stats.target_forwards} forwards)"),
        ("draft cost", f"{stats.draft_ms:.0f} ms drafting, {stats.draft_share:.0%} of the rounds' time"),
        ("speculative", f"{stats.tokens_per_s:.1f} tokens/s"),
        ("plain greedy decode, same prompt and length", "not measured yet" if plain is None
         else f"{plain.tokens_per_s:.1f} tokens/s ({plain.tokens} tokens in {plain.seconds * 1e3:.0f} ms)"),
        ("speedup", "—" if speed is None else f"{speed:.2f}×"),
    ]
    body = "".join(f"<tr><th style='text-align:left;padding-right:12px'>{esc(k)}</th><td>{esc(v)}</td></tr>"
                   for k, v in rows)
    attrs = (f'data-rounds="{stats.rounds}" data-acceptance="{stats.acceptance_rate:.4f}" '
             f'data-tokens-per-forward="{stats.tokens_per_forward:.4f}"'
             + ("" if speed is None else f' data-speedup="{speed:.4f}"'))
    return f'<div id="spec-stats" {attrs}><b>{esc(stats.drafter)}, k = {stats.draft_len}</b><table>{body}</table></div>'
