"""What a step predicted, read from Python: its logits at any position, their probabilities, its top tokens,
the logit lens at any position (every layer's full distribution, or one token's rank and probability), and
the commitment layer.

The last position of a step is read from what the step kept (the fp32 logits sampling read, the residual
after each layer at that position); any other position (the prefill's earlier tokens) runs the step again
(`inspector.session.replay`, one forward for the prefill) for its logits or its residuals. Logits are float32
raw logits: before any penalty, temperature or filter. `records[k].logits` is a float16 copy of the last
position's, which the page's views and trace files keep; read `run.logits(k)` for the numbers sampling read.

The lens reads the residual after each layer through the final norm and the LM head (as the model reads its
last layer's): row i is after layer i, so lens row i lines up with `run.residual_norms(k)` row i + 1 (that
array starts with the embedding). Its last row is the step's own logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from inspector.api.activations import Capture
from inspector.api.args import index, integer
from inspector.errors import InputError, InputTypeError
from inspector.session.records import TopToken


@dataclass(frozen=True)
class TokenLens:
    """One token through the logit lens of one position: per layer (after layer i) its rank (0 = the top)
    and probability."""

    token_id: int
    piece: str
    ranks: np.ndarray  # (layers,) int64
    probs: np.ndarray  # (layers,) float32


class Commitment(NamedTuple):
    """The layer from which the lens's top-1 stays the final top-1 (0: from the first layer on), and that token."""

    layer: int
    token_id: int
    piece: str


def _position(session: Any, step: int, position: Any) -> int:
    """A position of step `step` as an index among its new positions (negative from the end)."""
    return index(position, "position", session.trace.at(step).record.n_new)


def logits(session: Any, step: int, position: Any = None) -> np.ndarray:
    """(V,) float32 at one position of the step (None: its last, as sampling read it), or (T, V) for
    position="all"."""
    forward = session.trace.at(step)
    n = forward.record.n_new
    if position is None or (not isinstance(position, str) and index(position, "position", n) == n - 1):
        return forward.logits.detach().float().cpu().numpy()
    if isinstance(position, str) and position != "all":
        raise InputError(f"position must be an int or 'all', got {position!r:.40}")
    if isinstance(position, str) or n > 1:
        from inspector.session.replay import replay

        every = replay(session, forward.record.step, all_positions=True).cpu().numpy()  # (T, V)
        return every if isinstance(position, str) else every[index(position, "position", n)]
    return forward.logits.detach().float().cpu().numpy()


def top(session: Any, step: int, n: Any = 5, position: Any = None) -> list[TopToken]:
    """The `n` highest raw logits of a position, best first, each with its probability (softmax of the raw
    logits)."""
    n = integer(n, "n")
    x = torch.from_numpy(logits(session, step, position))
    if x.dim() != 1:
        raise InputError("top reads one position: give position=an int (or None: the last)")
    if not 1 <= n <= x.shape[-1]:
        raise InputError(f"n must be from 1 to the vocabulary size {x.shape[-1]}, got {n}")
    values, ids = torch.topk(x, n)
    probs = (values - torch.logsumexp(x, dim=-1)).exp()
    piece = session.tokenizer.piece
    return [TopToken(i, piece(i), v, p) for i, v, p in zip(ids.tolist(), values.tolist(), probs.tolist())]


@torch.inference_mode()
def lens_logits(session: Any, step: int, position: Any = -1) -> torch.Tensor:
    """(layers, V) float32: the residual after each layer at one position of the step, read through the final
    norm and the LM head; the last row is the step's logits there."""
    forward = session.trace.at(step)
    rec = forward.record
    i = _position(session, step, position)
    if i == rec.n_new - 1:
        if forward.lens_inputs is None:
            raise InputError("the lens needs the step's residuals: this run was made with record=False")
        resid, final = forward.lens_inputs, forward.logits
    else:
        from inspector.session.replay import replay

        L = session.config.num_hidden_layers
        names = [f"blocks.{layer}.hook_resid_post" for layer in range(L)]
        capture = Capture(names)
        every = replay(session, rec.step, capture, all_positions=True)  # (T, V)
        resid = torch.stack([torch.from_numpy(capture.values[n][i]) for n in names])  # (layers, D)
        final = every[i]
        w = session.model.model.embed_tokens.weight
        resid = resid.to(w.device, w.dtype)  # captured as float32: back in the model's dtype, as it ran
    return torch.cat([session.model.unembed(resid[:-1]).float().cpu(), final.float().cpu()[None]])  # (layers, V)


def lens(session: Any, step: int, position: Any = -1, token: Any = None) -> np.ndarray | TokenLens:
    """The lens's full distribution per layer, (layers, V) float32 probabilities; or with `token` (an id) that
    token's `TokenLens` (its rank and probability at every layer)."""
    x = lens_logits(session, step, position)
    logp = torch.log_softmax(x, dim=-1)
    if token is None:
        return logp.exp().numpy()
    if isinstance(token, str):
        raise InputTypeError("token is a token id (an int): model.tokenize(text) gives ids")
    t = integer(token, "token")
    if not 0 <= t < x.shape[-1]:
        raise InputError(f"token id {t} is outside the vocabulary: ids are 0..{x.shape[-1] - 1}")
    ranks = (x > x[:, t:t + 1]).sum(dim=-1)  # (layers,): how many tokens score above it
    return TokenLens(t, session.tokenizer.piece(t), ranks.numpy().astype(np.int64), logp[:, t].exp().numpy())


def commitment(session: Any, step: int) -> Commitment:
    """The step's commitment layer (also kept in `records[k].commitment`)."""
    found = session.commitment(step)
    if found is None:
        raise InputError("the commitment layer needs the step's residuals: this run was made with record=False")
    layer, token_id = found
    return Commitment(int(layer), int(token_id), session.tokenizer.piece(int(token_id)))
