"""`SpeculativeDecoder`: speculative decoding as a state machine of rounds, driven by the CLI, the tab and the bench.

`prefill(ids)` runs the full model over the prompt and draws token 1 exactly as `Session` does, through the
generation loop (`inspector.generation.loop`: its forward, its draw, its `Sequence` for ids, text and finish
reason; the levers, when given, act as in a session). Each `round()` then:
1. asks the drafter for k tokens after the context (the prompt and the output so far),
2. runs the full model ONCE over the last token and the k drafts (k+1 positions, written to the cache),
3. keeps the drafts the acceptance rule keeps and adds the corrected or bonus token (`verify`),
4. rolls the target cache and the drafter back past the rejected positions,
and returns a `RoundRecord`. Like `Session`, the newest token is generated but not yet in the cache: the
cache holds prompt + generated[:-1]. Generation ends at EOS, `max_new_tokens` or the context window, at
the exact token where plain decoding would end; k is capped per round so the verify never passes the
context and no round drafts past `max_new_tokens`. Greedy output equals plain greedy decoding token for
token up to float rounding (the verify forward sums k+1 positions in another order than one-token steps,
so a near-tie can flip); sampled output has the full model's distribution (not the same draws as `Session`).

`plain_decode(model, ids, tokens)` times plain greedy decoding of the same prompt and length (the speedup's
peer). Bad input (draft length < 1 or past the context, bad sampling settings) raises InputError.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch

from inspector.engine import steps
from inspector.engine.config import SamplingParams
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation.levers import Levers
from inspector.generation import loop
from inspector.generation.loop import NO_LEVERS
from inspector.generation.sequence import Sequence as Seq
from inspector.generation.sequence import SequenceOwner
from inspector.models.loader import LoadedModel
from inspector.speculative.drafters import Draft, Drafter
from inspector.speculative.rounds import DraftToken, PlainTiming, RoundRecord, SpecStats
from inspector.speculative.verify import accept_drafts, rollback, target_probs, verify_forward

TOP_N = 20  # candidates kept per emitted token when `keep_top` (the CLI's --json)


def check_draft_len(draft_len: int, prompt_len: int, context: int) -> None:
    """InputError unless 1 <= draft_len and one verify over the prompt's next k+1 positions fits the context."""
    if draft_len < 1:
        raise InputError(f"draft length must be >= 1, got {draft_len}")
    room = context - 1 - prompt_len  # the first verify writes positions prompt_len .. prompt_len + k
    if draft_len > room:
        raise InputError(f"draft length {draft_len} is past the context: a prompt of {prompt_len} tokens leaves "
                         f"room for {max(room, 0)} drafts in the {context}-token context window")


class SpeculativeDecoder(SequenceOwner):
    """One speculative generation over `loaded`'s model with `drafter`; rounds recorded in `self.rounds`. The
    public `inspector.SpeculativeRun` (`inspector.api.speculative`) wraps one."""

    def __init__(self, loaded: LoadedModel, drafter: Drafter, draft_len: int, params: SamplingParams, *,
                 max_new_tokens: int = 64, keep_top: bool = False, levers: Levers = NO_LEVERS) -> None:
        try:
            params.validate()
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if draft_len < 1:
            raise InputError(f"draft length must be >= 1, got {draft_len}")
        if max_new_tokens <= 0:
            raise InputError(f"max new tokens must be > 0, got {max_new_tokens}")
        self.model: Transformer = loaded.model
        self.tokenizer = loaded.tokenizer
        self.context = loaded.config.max_position_embeddings
        self._eos_ids = frozenset(loaded.stop_ids)
        self.drafter, self.draft_len, self.params, self.levers = drafter, draft_len, params, levers
        self.max_new_tokens, self.keep_top = max_new_tokens, keep_top
        self.cache = steps.new_cache(self.model)
        self.seq = self._sequence([])  # ids, text and finish reason of the generation
        self.tops: list[list[tuple[int, float, float]]] = []  # per generated token: (id, logit, prob) top-N
        self.rounds: list[RoundRecord] = []
        self.stats = SpecStats(drafter.name, draft_len)
        self.prefill_ms = 0.0

    def _sequence(self, prompt_ids: list[int]) -> Seq:
        return Seq(prompt_ids, self.max_new_tokens, self.context, stop_ids=self._eos_ids, tokenizer=self.tokenizer,
                   cache=self.cache)

    @property
    def eos_ids(self) -> frozenset[int]:
        """The tokens that end the generation (the model's EOS set unless replaced)."""
        return self._eos_ids

    @eos_ids.setter
    def eos_ids(self, ids: frozenset[int]) -> None:
        self._eos_ids = self.seq.stop_ids = frozenset(ids)

    def prefill(self, ids: Sequence[int]) -> None:
        """The full model over the prompt; token 1 drawn as `Session` draws it."""
        ids = list(ids)
        if not ids:
            raise InputError("prompt is empty")
        if len(ids) >= self.context:
            raise InputError(f"prompt is {len(ids)} tokens; the context window is {self.context} tokens")
        check_draft_len(self.draft_len, len(ids), self.context)
        self.drafter.reset()
        self.seq = self._sequence(ids)
        t0 = time.perf_counter()
        logits, _ = loop.prefill(self.seq, self.model, self.cache, self.params, self.levers)  # (V,)
        self.prefill_ms = (time.perf_counter() - t0) * 1e3
        self._keep_top(logits[None])

    def round(self) -> RoundRecord:
        """Draft, verify in one forward, accept, roll back; InputError when finished or not prefilled."""
        if not self.prompt_ids:
            raise InputError("nothing to continue: run prefill first")
        if self.finished:
            raise InputError(f"generation has finished ({self.finished})")
        n = self.cache.lengths[0]  # position of the newest token, the first one fed
        context = self.prompt_ids + self.generated_ids
        remaining = self.max_new_tokens - len(self.generated_ids)
        k = max(0, min(self.draft_len, remaining - 1, self.context - 1 - n))
        t0 = time.perf_counter()
        draft = self.drafter.draft(context, k, self.params) if k else Draft([], None, [])
        drafts = draft.ids[:k]
        t1 = time.perf_counter()
        logits = verify_forward(self.model, self.cache, [context[-1], *drafts], self.levers)  # (k+1, V)
        contexts = [context + drafts[:i] for i in range(len(drafts) + 1)]
        p = target_probs(logits, self.params, contexts, self.levers.processors)  # (k+1, V)
        q = None if draft.q is None else draft.q[:len(drafts)]
        verdict = accept_drafts(drafts, p, q, self.params, first_position=n + 1)
        kept = n + 1 + verdict.accepted  # the fed token and the kept drafts stay in the cache
        rollback(self.cache, kept)
        self.drafter.rollback(kept)
        shown_p = torch.softmax(logits, -1) if self.params.temperature == 0.0 else p  # (k+1, V)
        emitted: list[int] = []
        for i, token in enumerate([*drafts[:verdict.accepted], verdict.token]):
            if self.finished:
                break
            self._keep_top(logits[i:i + 1])
            self.seq.append(token)
            emitted.append(token)
        t2 = time.perf_counter()
        piece = self.tokenizer.piece
        nxt = verdict.token if len(emitted) == verdict.accepted + 1 else None
        rec = RoundRecord(
            index=len(self.rounds), start_pos=n, fed_id=context[-1], fed_piece=piece(context[-1]),
            drafts=[DraftToken(x, piece(x), float(draft.shown_q[i]), float(shown_p[i, x]), i < verdict.accepted)
                    for i, x in enumerate(drafts)],
            accepted=verdict.accepted, next_id=nxt, next_piece=piece(nxt) if nxt is not None else "",
            next_p=float(shown_p[verdict.accepted, nxt]) if nxt is not None else 0.0,
            next_kind="none" if nxt is None else "plain" if not drafts else "bonus" if verdict.bonus else "corrected",
            emitted=emitted, kv_before=n, kv_written=n + len(drafts) + 1, kv_after=self.cache.lengths[0],
            draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3,
        )
        self.rounds.append(rec)
        self.stats.add(rec)
        return rec

    def play(self) -> Iterator[RoundRecord]:
        """Rounds until EOS, max new tokens or the context end."""
        while not self.finished:
            yield self.round()

    def _keep_top(self, logits: torch.Tensor) -> None:
        """The top-N (id, logit, prob) of the logits row (1, V) that decided the next token, when asked."""
        if self.keep_top:
            top = torch.topk(logits[0], TOP_N)
            probs = torch.softmax(logits[0], -1)[top.indices]
            self.tops.append([(int(i), float(v), float(pr)) for i, v, pr in zip(top.indices, top.values, probs)])


def plain_decode(model: Transformer, ids: Sequence[int], tokens: int) -> tuple[list[int], PlainTiming]:
    """Plain greedy decoding of `ids` through the generation loop (`loop.greedy`): the prefill's token, then
    `tokens` decode steps, fewer where the context window ends (timed, the prefill not)."""
    seq = Seq(ids, tokens + 1, model.config.max_position_embeddings)
    decoding = loop.greedy(seq, model, steps.new_cache(model))
    next(decoding)  # the prefill
    t0 = time.perf_counter()
    for _ in decoding:
        pass
    return list(seq.generated_ids), PlainTiming(len(seq.generated_ids) - 1, time.perf_counter() - t0)
