"""`SpeculativeRun`: `Model.prefill(..., speculative="ngram" | "early-exit:L", draft_len=K)`, the same
drafters and verify loop as `inspector run --speculative` (`inspector.speculative.decoding.SpeculativeDecoder`).

A step is one round: the drafter proposes up to K tokens, the full model verifies them in one forward and
keeps a prefix (plus a corrected or bonus token). No recorder runs in a speculative forward, so there are
no per-forward logits, norms or attention to read: the rounds are the record (`rounds`, `stats`), drawn by
the Speculative lab's builder (`figure("speculative")`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from inspector.api.args import integer
from inspector.errors import InputError
from inspector.generation.request import DEFAULT_DRAFT_LEN, RunRequest
from inspector.validate import shown

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from inspector.api.views import Html
    from inspector.engine.config import SamplingParams
    from inspector.speculative.rounds import RoundRecord, SpecStats

VIEWS = ("speculative", "rounds")


class SpeculativeRun:
    """A speculative generation: step rounds, read the text, the rounds and the acceptance statistics."""

    def __init__(self, run: Any, model: Any, tokenize_ms: float, request: RunRequest | None = None) -> None:
        """Made by `Model.prefill(..., speculative=...)`, not directly."""
        self.engine_run = run  # inspector.speculative.decoding.SpeculativeDecoder
        self.model = model
        self.tokenize_ms = tokenize_ms
        self.request = request  # the run's description (`inspector.generation.request.RunRequest`)

    def __repr__(self) -> str:
        return (f"<inspector SpeculativeRun ({self.stats.drafter}, k={self.stats.draft_len}): "
                f"{len(self.generated_ids)} generated in {len(self.rounds)} rounds, finished: {self.finished}>")

    def step(self, n: int = 1) -> RoundRecord:
        """Run `n` rounds (fewer when the generation finishes first); the newest round's record."""
        n = integer(n, "n")
        if n < 1:
            raise InputError(f"n must be a whole number >= 1, got {n}")
        if self.finished:
            raise InputError(f"generation has finished ({self.finished}): prefill again to go on")
        for _ in range(n):
            if self.finished:
                break
            self.engine_run.round()
        return self.rounds[-1]

    def play(self) -> Iterator[RoundRecord]:
        """Rounds to the end, yielding each round's record."""
        while not self.finished:
            yield self.step()

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids."""
        return list(self.engine_run.prompt_ids)

    @property
    def generated_ids(self) -> list[int]:
        """The generated token ids (the prefill's, then every round's kept drafts and correction)."""
        return list(self.engine_run.generated_ids)

    @property
    def text(self) -> str:
        """The generated text."""
        return self.engine_run.text

    @property
    def finished(self) -> str | None:
        """None while it can go on, else the finish reason."""
        return self.engine_run.finished

    @property
    def rounds(self) -> list[RoundRecord]:
        """Every round: the drafts with q and p, how many were accepted, the correction, the KV cache lengths."""
        return self.engine_run.rounds

    @property
    def stats(self) -> SpecStats:
        """Rounds, drafted, accepted, acceptance rate, tokens per full-model forward."""
        return self.engine_run.stats

    def to_json(self) -> dict[str, Any]:
        """What `inspector run --speculative ... --json` prints for this run, with its "request"
        (`RunRequest.to_json()`) as the plain run's JSON has it."""
        out = speculative_dict(self.model.loaded, self.engine_run, self.tokenize_ms)
        if self.request is not None:
            out["request"] = self.request.to_json()
        return out

    def figure(self, view: str = "speculative") -> go.Figure | Html:
        """The Speculative lab's views: "speculative" (the KV cache per round: written, rolled back, kept), "rounds"
        (each round's drafts, accepted and corrected, as HTML)."""
        from inspector.api.views import Html
        from inspector.viz import speculative as vsp

        if view == "speculative":
            return vsp.kv_figure(self.rounds)
        if view == "rounds":
            return Html(vsp.rounds_html(self.rounds) + vsp.stats_html(self.stats))
        raise InputError(f"unknown view {shown(view)}: a speculative run's views are {', '.join(VIEWS)}")


def start(model: Any, request: RunRequest, params: SamplingParams, keep_top: bool = True) -> SpeculativeRun:
    """Prefill the speculative run `request` describes (its token ids, or its prompt's); `keep_top`: keep the
    top tokens of every position (the JSON's `top`)."""
    from inspector.speculative.decoding import SpeculativeDecoder as Engine
    from inspector.speculative.drafters import make_drafter

    loaded = model.loaded
    drafter = make_drafter(request.speculative, loaded.model)
    draft_len = DEFAULT_DRAFT_LEN if request.draft_len is None else request.draft_len
    t0 = time.perf_counter()
    ids = (loaded.tokenizer.prompt_ids(request.prompt, request.chat, request.system) if request.ids is None
           else list(request.ids))
    tokenize_ms = (time.perf_counter() - t0) * 1e3
    run = Engine(loaded, drafter, draft_len, params, max_new_tokens=request.max_new_tokens, keep_top=keep_top)
    run.prefill(ids)
    return SpeculativeRun(run, model, tokenize_ms, request)


def speculative_dict(loaded: Any, run: Any, tokenize_ms: float) -> dict[str, Any]:
    """The `--json` object of a finished speculative run (the plain run's keys, plus `speculative`)."""
    piece = loaded.tokenizer.piece
    round_of = [None]  # the round that produced each generated token (None: the prefill's)
    tpot: list[float] = []
    for r in run.rounds:
        round_of += [r.index] * len(r.emitted)
        tpot += [(r.draft_ms + r.verify_ms) / len(r.emitted)] * len(r.emitted)
    steps = [{"step": i, "chosen_id": t, "chosen_piece": piece(t), "round": round_of[i],
              "top": [{"id": c, "piece": piece(c), "logit": lg, "prob": pr} for c, lg, pr in run.tops[i]]}
             for i, t in enumerate(run.generated_ids)]
    st = run.stats
    return {
        "model": loaded.name,
        "prompt_ids": run.prompt_ids,
        "prompt_pieces": loaded.tokenizer.pieces(run.prompt_ids),
        "generated_ids": run.generated_ids,
        "text": run.text,
        "finished": run.finished,
        "steps": steps,
        "timings": {"ttft_ms": tokenize_ms + run.prefill_ms, "tpot_ms": tpot, "tokenize_ms": tokenize_ms,
                    "prefill_ms": run.prefill_ms},
        "speculative": {
            "drafter": st.drafter, "draft_len": st.draft_len, "rounds": st.rounds, "drafted": st.drafted,
            "accepted": st.accepted, "target_forwards": st.target_forwards,
            "tokens_per_forward": st.tokens_per_forward, "acceptance_rate": st.acceptance_rate,
            "per_round": [{"drafted": [d.id for d in r.drafts], "accepted": r.accepted, "correction": r.next_id,
                           "kind": r.next_kind} for r in run.rounds],
        },
    }
