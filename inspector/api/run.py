"""`Run`: one generation from Python, over the `Session` the page and `inspector run` step.

A run is made by `Model.prefill(...)` (or `inspector.open_trace(path)`); it holds a
`inspector.session.session.Session` and the sampling parameters it was prefilled with. Step k is the
prefill's forward for k = 0 and the k-th decode step after it; step k sampled `generated_ids[k]`. Every
accessor takes a step index (`step`, negative counts from the newest, as in Python) and reads what that step
recorded; what a step does not keep is computed when asked: attention weights (from the recorded queries and
the cached keys, as the views do), the logit lens and its commitment layer (`run.lens`, `run.commitment`,
kept in the record once computed), the logits of the prefill's earlier positions and an activation cache
(`run.cache`: the step run again, `inspector.session.replay`). `figure(view)` draws the page's own view with
the page's builder (`inspector.api.views`). Argument rules (indices, types, refusals): `inspector.api.args`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from inspector.api import readings
from inspector.api.args import index, integer
from inspector.generation.request import RunRequest, keyword_errors
from inspector.errors import InputError
from inspector.generation.lever_spec import LeverSpec

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from inspector.api.readings import Commitment, TokenLens
    from inspector.api.views import Html
    from inspector.engine.config import SamplingParams
    from inspector.session.records import ForwardRecord, SampleRecord, TopToken
    from inspector.session.session import Session


class Run:
    """One generation: step it, read what each forward recorded, draw the page's views, save it."""

    def __init__(self, session: Session, params: SamplingParams, *, model: Any = None, prompt: str | None = None,
                 chat: bool | None = None, system: str | None = None, unsaveable: str | None = None,
                 levers: LeverSpec = LeverSpec(), request: RunRequest | None = None) -> None:
        """Made by `Model.prefill` and `inspector.open_trace`, not directly. `unsaveable`: None, or why `save`
        refuses (the levers a trace file does not keep); `levers`: the run's interventions as data (what
        `save` writes); `request`: the description it was made from (None: a run reopened from a file)."""
        self.request = request
        self.session = session  # the engine's session: everything below reads it
        self.params = params  # the sampling parameters every step draws with
        self.model = model  # the `inspector.api.model.Model` that runs it (None: a read-only trace)
        self.levers = levers  # its interventions and hook points (`inspector.generation.lever_spec.LeverSpec`)
        self._prompt, self._chat, self._system, self._unsaveable = prompt, chat, system, unsaveable

    def __repr__(self) -> str:
        state = f"finished: {self.finished}" if self.finished else "running"
        return (f"<inspector Run: {len(self.prompt_ids)} prompt tokens, {len(self.generated_ids)} generated, "
                f"{state}, text {self.text[:60]!r}>")

    # ---- generation
    def step(self, n: int = 1) -> ForwardRecord:
        """Run `n` decode steps (fewer when the generation finishes first); the newest forward's record.
        InputError when it has already finished, or for a read-only trace."""
        n = integer(n, "n")
        if n < 1:
            raise InputError(f"n must be a whole number >= 1, got {n}")
        read_only = getattr(self.session, "read_only", None)  # a trace without its model, or with hooks
        if read_only is not None:
            raise InputError(read_only)
        if self.finished:
            raise InputError(f"generation has finished ({self.finished}): prefill again to go on")
        for _ in range(n):
            if self.finished:
                break
            self.session.step(self.params)
        return self.session.records[-1]

    def play(self) -> Iterator[ForwardRecord]:
        """Step to the end (EOS, max_new_tokens, a stop string or the context), yielding each step's record."""
        while not self.finished:
            yield self.step()

    # ---- what the generation holds
    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids (after the chat template when prefilled with chat=True)."""
        return list(self.session.prompt_ids)

    @property
    def generated_ids(self) -> list[int]:
        """The sampled token ids: generated_ids[k] was drawn by forward k."""
        return list(self.session.generated_ids)

    @property
    def text(self) -> str:
        """The generated text (detokenized incrementally; a stop string is cut off)."""
        return self.session.text

    @property
    def finished(self) -> str | None:
        """None while the generation can go on, else why it ended: "eos", "max_tokens", "stop_string",
        "context_full"."""
        return self.session.finished

    @property
    def pieces(self) -> list[str]:
        """The display piece of every token, prompt then generated, by position."""
        return self.session.token_pieces()

    @property
    def records(self) -> list[ForwardRecord]:
        """Every step's record (`inspector.session.records.ForwardRecord`): records[k] is step k. Its
        `logits` is a float16 copy of the last position's (what views and trace files keep; `run.logits(k)` is
        the float32 sampling read); `logit_lens` and `commitment` are filled once asked (`run.lens`,
        `run.logit_lens`, `run.commitment`, or the page's view that shows them)."""
        return self.session.records

    @property
    def num_forwards(self) -> int:
        """Steps run so far: the prefill plus one per decode step."""
        return len(self.session.records)

    # ---- one step's recordings
    def forward_index(self, step: int) -> int:
        """`step` as an index from 0 (negative counts from the newest); InputError naming the range."""
        return index(step, "step", self.num_forwards)

    def record(self, step: int = -1) -> ForwardRecord:
        """Step `step`'s record: what the page's views read."""
        return self.session.records[self.forward_index(step)]

    def logits(self, step: int = -1, position: int | str | None = None) -> np.ndarray:
        """Raw float32 logits of step `step`: (vocab,) at its last position as sampling read them (position
        None), at one of its positions (an index among the positions it added: the prefill's prompt tokens),
        or (positions, vocab) for position="all" (the step run again: one forward for the prefill)."""
        return readings.logits(self.session, self.forward_index(step), position)

    def probs(self, step: int = -1, position: int | str | None = None) -> np.ndarray:
        """Softmax of `logits(step, position)` (before any penalty, temperature or filter), float32."""
        x = self.logits(step, position).astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)

    def logprobs(self, step: int = -1, position: int | str | None = None) -> np.ndarray:
        """Log-softmax of `logits(step, position)`, float32."""
        x = self.logits(step, position).astype(np.float64)
        m = x.max(axis=-1, keepdims=True)
        return (x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))).astype(np.float32)

    def top(self, step: int = -1, n: int = 5, position: int | None = None) -> list[TopToken]:
        """The `n` tokens of highest raw logit at a position of step `step` (None: its last), best first, each
        with its probability (`TopToken`: id, piece, logit, prob)."""
        return readings.top(self.session, self.forward_index(step), n, position)

    def lens(self, step: int = -1, position: int = -1, token: int | None = None) -> np.ndarray | TokenLens:
        """The logit lens at a position of step `step` (an index among its new positions; the last by
        default): (layers, vocab) float32 probabilities, row i read from the residual after layer i (so row i
        is `residual_norms(step)` row i + 1; the last row is the step's own distribution); with `token` (an id)
        that token's `TokenLens`: its rank (0 = top) and probability at every layer. Another position than the
        last runs the step again."""
        return readings.lens(self.session, self.forward_index(step), position, token)

    def commitment(self, step: int = -1) -> Commitment:
        """(layer, token_id, piece): the layer from which the lens's top-1 stays step `step`'s top-1, found
        without the whole lens and kept in `records[step].commitment`."""
        return readings.commitment(self.session, self.forward_index(step))

    def cache(self, names: str | Iterable[str], step: int = -1, *, max_bytes: int | None = None
              ) -> dict[str, np.ndarray]:
        """{trace point: numpy array (positions, ...)} of step `step` (`inspector.api.activations`): names
        or globs on the TransformerLens-style names (`blocks.*.hook_resid_post`; `model.hook_names()` lists
        them), the step run again with this run's levers and hooks. The bytes are counted first
        (`cache_nbytes`); past `max_bytes` (default 4 GiB) it refuses, saying both."""
        from inspector.api import activations

        names = self._points(names)
        cap = activations.MAX_BYTES if max_bytes is None else integer(max_bytes, "max_bytes")
        return activations.cache(self.session, names, self.forward_index(step), cap)

    def cache_nbytes(self, names: str | Iterable[str], step: int = -1) -> int:
        """The bytes `cache(names, step)` would hold, counted without running anything."""
        from inspector.api import activations

        rec = self.record(step)
        return activations.estimate(self.session.model, self._points(names), rec.n_new, rec.positions.stop)

    def residual_norms(self, step: int = -1) -> np.ndarray:
        """(layers + 1, positions of step `step`) float32: the residual stream's L2 norm entering layer 0 (the
        embedding), then after every layer, at each position the step added."""
        rec = self.record(step)
        return np.concatenate([rec.resid_pre[:1], rec.resid_post], axis=0).astype(np.float32)

    def routing(self, step: int = -1) -> np.ndarray | None:
        """(layers, positions of step `step`, experts per token) int32: the experts each position the step
        added went to in every layer, highest weight first (a mixture of experts; None for a dense model). The
        weights and router probabilities are on `run.records[step].routing`."""
        routing = self.record(step).routing
        return None if routing is None else np.asarray(routing.expert_ids, dtype=np.int32)

    def attention(self, layer: int, step: int = -1) -> np.ndarray:
        """(query heads, queries of step `step`, keys) float32: the attention weights of `layer` for every
        query position step `step` added, over every key it saw (rows sum to 1; masked keys 0)."""
        k = self.forward_index(step)
        layer = self._layer(layer)
        heads = self.session.config.num_attention_heads
        return np.stack([self.session.attention_pattern(k, layer, h) for h in range(heads)]).astype(np.float32)

    def logit_lens(self, step: int = -1) -> list[list[TopToken]]:
        """Per layer, the top-5 tokens of step `step`'s last position read through the final norm and LM head
        (what the page's lens table shows; computed once asked, then kept in the record)."""
        return self.session.logit_lens(self.forward_index(step))

    def kv_bytes(self, step: int = -1) -> list[int]:
        """Per layer, the bytes of K and V in the KV cache after step `step` (as the cache measures them)."""
        return [kv.nbytes for kv in self.record(step).kv]

    def sample(self, step: int = -1) -> SampleRecord:
        """How step `step`'s token was drawn: the distribution after every stage, the candidates, the seed."""
        rec = self.record(step)
        if rec.sample is None:
            raise InputError(f"step {rec.step} drew no token")
        return rec.sample

    # ---- the page's views
    def figure(self, view: str, step: int = -1, *, layer: int = 0, head: int = 0,
               position: int | None = None) -> go.Figure | Html:
        """The page's view `view` after step `step`, from the page's own builder: "residual", "attention",
        "kv", "kv_growth", "sampling", "timing", "routing" (a mixture of experts) give a plotly Figure; "inventory" (an HTML table on the page
        too) an `Html` a notebook shows inline. `layer`/`head` pick the attention view's head, `position` the
        residual and attention views' position (default: the newest of step `step`)."""
        from inspector.api import views

        return views.figure(self, view, step, layer=layer, head=head, position=position)

    def html(self, view: str, step: int = -1, *, position: int | None = None) -> Html:
        """The page's HTML beside a view: "residual" (the heatmap), "lens", "attention" (every layer and head's
        row), "kv" (the summary), "sampling" (the stage table), "tokens" (the chips), "inventory"."""
        from inspector.api import views

        return views.html(self, view, step, position=position)

    # ---- trace files
    def save(self, path: str | os.PathLike[str]) -> int:
        """Write the run as a trace file (`inspector trace FILE`, the page's Open trace and
        `inspector.open_trace` read it), with its interventions (`levers`: reopened with the model, it steps
        on under the same ones); the file's size in bytes. A hook is a Python function, which a file cannot
        keep: its trace point is written, a warning says so, and the reopened run reads but does not step.
        InputError for quantized weights or cache or an eviction policy, which a file does not keep."""
        from inspector.session.trace_file import save_trace

        if self._unsaveable is not None:
            raise InputError(self._unsaveable)
        if self.levers.has_hooks:
            warnings.warn(f"run.save keeps the points of this run's hooks ({', '.join(self.levers.hooks)}) but not "
                          "their functions: the reopened run shows every saved step and does not step on",
                          stacklevel=2)
        with keyword_errors():
            return save_trace(self.session, path, prompt=self._prompt, chat=self._chat, system=self._system,
                              levers=self.levers)

    # ---- checks
    def _layer(self, layer: int) -> int:
        return index(layer, "layer", self.session.config.num_hidden_layers)

    def _head(self, head: int) -> int:
        return index(head, "head", self.session.config.num_attention_heads)

    def _points(self, names: str | Iterable[str]) -> list[str]:
        from inspector.api.hooks import resolve
        from inspector.engine.trace import model_hook_names

        return resolve(names, model_hook_names(self.session.config))
