"""Penalties, biases and bans: the logits processors that read the ids so far (pure torch, no text).

Each is a `LogitsProcessor` (`inspector.engine.processors`): `proc(ids, logits) -> logits`, logits (..., V)
never edited in place, every row processed with the same `ids`. Per-sequence constants (the prompt
length, the EOS ids) are given at construction, so a call is a function of (ids, logits) alone: a re-draw,
a branch or a preview gives the same result. Each computes exactly what the named reference computes
(the tests compare bit for bit):

- `RepetitionPenalty` — `transformers` RepetitionPenaltyLogitsProcessor (Keskar et al. 2019, CTRL): the
  logit of every token seen so far (prompt included) is divided by the penalty when positive and
  multiplied by it when negative.
- `PresencePenalty`, `FrequencyPenalty` — the OpenAI rule (also vLLM's), over generated tokens only:
  logit - presence x [count > 0] and logit - frequency x count.
- `LogitBias` — per token id, bias added to the logit (OpenAI `logit_bias`; `transformers`
  SequenceBiasLogitsProcessor with one-token sequences).
- `NoRepeatNGram` — `transformers` NoRepeatNGramLogitsProcessor: a token that would complete an n-gram
  already in the ids (prompt included) is banned.
- `BadWords` — `transformers` NoBadWordsLogitsProcessor: a one-token sequence is always banned; a longer one
  bans its last token when the ids end with the rest of it. One-token sequences equal to an EOS id are
  dropped (as `transformers` does), so a run can still end.
- `MinNewTokens` — `transformers` MinNewTokensLengthLogitsProcessor: EOS ids banned until `min_new` tokens
  have been generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


def _rows(logits: torch.Tensor) -> torch.Tensor:
    return logits.reshape(-1, logits.shape[-1])  # (rows, V)


@dataclass(frozen=True)
class RepetitionPenalty:
    """Seen tokens: logit / penalty when > 0, logit x penalty otherwise (penalty > 1 discourages repeats)."""

    penalty: float
    name: str = "repetition penalty"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.penalty == 1.0 or not len(ids):
            return logits
        x = _rows(logits)
        R, V = x.shape
        seen = torch.as_tensor(list(ids), dtype=torch.long).clamp(max=V).expand(R, -1)  # (rows, len(ids))
        padded = torch.nn.functional.pad(x, (0, 1))  # a spare column for ids past the logits
        score = torch.gather(padded, 1, seen)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return padded.scatter(1, seen, score)[..., :V].reshape(logits.shape)


def _generated_counts(ids: Sequence[int], prompt_len: int, V: int, device: torch.device) -> torch.Tensor:
    gen = torch.as_tensor(list(ids[prompt_len:]), dtype=torch.long, device=device)
    return torch.bincount(gen[gen < V], minlength=V).to(torch.float32)  # (V,)


@dataclass(frozen=True)
class PresencePenalty:
    """Every token generated at least once: logit - penalty (OpenAI presence_penalty, -2..2)."""

    penalty: float
    prompt_len: int
    name: str = "presence penalty"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.penalty == 0.0 or len(ids) <= self.prompt_len:
            return logits
        counts = _generated_counts(ids, self.prompt_len, logits.shape[-1], logits.device)
        return logits - self.penalty * (counts > 0).to(logits.dtype)


@dataclass(frozen=True)
class FrequencyPenalty:
    """Every generated token: logit - penalty x (times generated) (OpenAI frequency_penalty, -2..2)."""

    penalty: float
    prompt_len: int
    name: str = "frequency penalty"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self.penalty == 0.0 or len(ids) <= self.prompt_len:
            return logits
        counts = _generated_counts(ids, self.prompt_len, logits.shape[-1], logits.device)
        return logits - self.penalty * counts.to(logits.dtype)


@dataclass(frozen=True)
class LogitBias:
    """logit[id] + bias for each (id, bias) pair; ids must be inside the vocabulary."""

    bias: tuple[tuple[int, float], ...]
    name: str = "logit bias"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if not self.bias:
            return logits
        V = logits.shape[-1]
        add = torch.zeros(V, dtype=torch.float32, device=logits.device)
        tokens = [t for t, _ in self.bias]
        if max(tokens) >= V:
            raise ValueError(f"logit bias for token {max(tokens)}, outside the vocabulary ({V})")
        add[tokens] = torch.tensor([float(b) for _, b in self.bias], device=logits.device)
        return logits + (torch.zeros_like(logits) + add)


@dataclass(frozen=True)
class NoRepeatNGram:
    """Ban every token that would complete an n-gram (n = size) already present in the ids."""

    size: int
    name: str = "no-repeat n-gram"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        n = self.size
        if n <= 0 or len(ids) < n:
            return logits
        seq = torch.as_tensor(list(ids), dtype=torch.long)
        prefix = seq[len(ids) + 1 - n:]  # the n-1 newest ids (empty when n == 1)
        windows = seq.unfold(0, n, 1)  # (len - n + 1, n): every n-gram so far
        matches = (windows[:, :-1] == prefix).all(dim=-1)
        x = _rows(logits)
        V = x.shape[-1]
        banned = torch.zeros(V + 1, dtype=torch.bool, device=logits.device)  # a spare column for non-matches
        banned[torch.where(matches, windows[:, -1].clamp(max=V), V)] = True
        return x.masked_fill(banned[:V], NEG_INF).reshape(logits.shape)


@dataclass(frozen=True)
class BadWords:
    """Ban token sequences: the last token of each, when the ids end with the rest of it."""

    sequences: tuple[tuple[int, ...], ...]
    eos_ids: tuple[int, ...] = ()
    name: str = "bad words"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        seqs = [s for s in self.sequences if s and not (len(s) == 1 and s[0] in self.eos_ids)]
        if not seqs:
            return logits
        V = logits.shape[-1]
        bias = torch.zeros(V, dtype=torch.float32, device=logits.device)
        tail = list(ids)
        for s in seqs:
            prefix = list(s[:-1])
            if len(prefix) > len(tail):
                continue
            if not prefix or tail[len(tail) - len(prefix):] == prefix:
                bias[s[-1]] = NEG_INF
        return logits + (torch.zeros_like(logits) + bias)


@dataclass(frozen=True)
class MinNewTokens:
    """EOS ids get -inf until `min_new` tokens have been generated after the prompt."""

    min_new: int
    prompt_len: int
    eos_ids: tuple[int, ...]
    name: str = "min new tokens"

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if len(ids) - self.prompt_len >= self.min_new or not self.eos_ids:
            return logits
        V = logits.shape[-1]
        eos = torch.isin(torch.arange(V, device=logits.device), torch.tensor(self.eos_ids, device=logits.device))
        return torch.where(eos, NEG_INF, logits)
