"""`Run`: one generation from Python, over the `Session` the page and `inspector run` step.

A run is made by `Model.prefill(...)` (or `inspector.open_trace(path)`); it holds a
`inspector.session.session.Session` and the sampling parameters it was prefilled with. Forward k is the
prefill for k = 0 and the k-th decode step after it; forward k sampled `generated_ids[k]`. Every accessor
takes a forward index k (negative counts from the newest, as in Python) and reads what that forward
recorded: nothing is recomputed except the attention weights, which the views also compute from the
recorded queries and the cached keys. `figure(view)` draws the page's own view with the page's builder
(`inspector.api.views`). Every refusal is an `InputError` with one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from inspector.api.options import keyword_errors
from inspector.errors import InputError
from inspector.validate import Bound

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from inspector.api.views import Html
    from inspector.engine.config import SamplingParams
    from inspector.session.records import ForwardRecord, SampleRecord, TopToken
    from inspector.session.session import Session


class Run:
    """One generation: step it, read what each forward recorded, draw the page's views, save it."""

    def __init__(self, session: Session, params: SamplingParams, *, model: Any = None, prompt: str | None = None,
                 chat: bool | None = None, system: str | None = None, unsaveable: str | None = None) -> None:
        """Made by `Model.prefill` and `inspector.open_trace`, not directly. `unsaveable`: None, or why `save`
        refuses (the levers a trace file does not keep)."""
        self.session = session  # the engine's session: everything below reads it
        self.params = params  # the sampling parameters every step draws with
        self.model = model  # the `inspector.api.model.Model` that runs it (None: a read-only trace)
        self._prompt, self._chat, self._system, self._unsaveable = prompt, chat, system, unsaveable

    def __repr__(self) -> str:
        state = f"finished: {self.finished}" if self.finished else "running"
        return (f"<inspector Run: {len(self.prompt_ids)} prompt tokens, {len(self.generated_ids)} generated, "
                f"{state}, text {self.text[:60]!r}>")

    # ---- generation
    def step(self, n: int = 1) -> ForwardRecord:
        """Run `n` decode steps (fewer when the generation finishes first); the newest forward's record.
        InputError when it has already finished, or for a read-only trace."""
        n = int(Bound("n", True, 1).parse(n))
        read_only = getattr(self.session, "read_only", None)  # a trace opened without its recording model
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
        """None while the generation can go on, else why it ended: "eos", "max_tokens", "stop",
        "context_full"."""
        return self.session.finished

    @property
    def pieces(self) -> list[str]:
        """The display piece of every token, prompt then generated, by position."""
        return self.session.token_pieces()

    @property
    def records(self) -> list[ForwardRecord]:
        """Every forward's record (`inspector.session.records.ForwardRecord`): records[k] is forward k."""
        return self.session.records

    @property
    def num_forwards(self) -> int:
        """Forwards run so far: the prefill plus one per decode step."""
        return len(self.session.records)

    # ---- one forward's recordings
    def forward_index(self, k: int) -> int:
        """k as a forward index from 0 (negative counts from the newest); InputError naming the range."""
        n = self.num_forwards
        return int(Bound("step", True, -n, n - 1).parse(k)) % n

    def record(self, k: int = -1) -> ForwardRecord:
        """Forward k's record: what the page's views read."""
        return self.session.records[self.forward_index(k)]

    def logits(self, k: int = -1) -> np.ndarray:
        """(vocab,) float32: the logits of forward k's last position (k = 0: the prefill's last prompt token),
        as sampling read them."""
        forward = self.session.trace.forwards[self.forward_index(k)]
        return forward.logits.detach().float().cpu().numpy()

    def residual_norms(self, k: int = -1) -> np.ndarray:
        """(layers + 1, positions of forward k) float32: the residual stream's L2 norm entering layer 0 (the
        embedding), then after every layer, at each position forward k added."""
        rec = self.record(k)
        return np.concatenate([rec.resid_pre[:1], rec.resid_post], axis=0).astype(np.float32)

    def routing(self, k: int = -1) -> np.ndarray | None:
        """(layers, positions of forward k, experts per token) int32: the experts each position forward k added
        went to in every layer, highest weight first (a mixture of experts; None for a dense model). The
        weights and router probabilities are on `run.records[k].routing`."""
        routing = self.record(k).routing
        return None if routing is None else np.asarray(routing.expert_ids, dtype=np.int32)

    def attention(self, layer: int, step: int = -1) -> np.ndarray:
        """(query heads, queries of forward `step`, keys) float32: the attention weights of `layer` for every
        query position forward `step` added, over every key it saw (rows sum to 1; masked keys 0)."""
        k = self.forward_index(step)
        layer = self._layer(layer)
        heads = self.session.config.num_attention_heads
        return np.stack([self.session.attention_pattern(k, layer, h) for h in range(heads)]).astype(np.float32)

    def logit_lens(self, k: int = -1) -> list[list[TopToken]]:
        """Per layer, the top-5 tokens of forward k's last position read through the final norm and LM head."""
        return self.session.logit_lens(self.forward_index(k))

    def kv_bytes(self, k: int = -1) -> list[int]:
        """Per layer, the bytes of K and V in the KV cache after forward k (as the cache measures them)."""
        return [kv.nbytes for kv in self.record(k).kv]

    def sample(self, k: int = -1) -> SampleRecord:
        """How forward k's token was drawn: the distribution after every stage, the candidates, the seed."""
        rec = self.record(k)
        if rec.sample is None:
            raise InputError(f"forward {rec.step} drew no token")
        return rec.sample

    # ---- the page's views
    def figure(self, view: str, step: int = -1, *, layer: int = 0, head: int = 0,
               position: int | None = None) -> go.Figure | Html:
        """The page's view `view` after forward `step`, from the page's own builder: "residual", "attention",
        "kv", "kv_growth", "sampling", "timing" give a plotly Figure; "inventory" (an HTML table on the page
        too) an `Html` a notebook shows inline. `layer`/`head` pick the attention view's head, `position` the
        residual and attention views' position (default: the newest of forward `step`)."""
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
        `inspector.open_trace` read it); the file's size in bytes."""
        from inspector.session.trace_file import save_trace

        if self._unsaveable is not None:
            raise InputError(self._unsaveable)
        with keyword_errors():
            return save_trace(self.session, path, prompt=self._prompt, chat=self._chat, system=self._system)

    # ---- checks
    def _layer(self, layer: int) -> int:
        n = self.session.config.num_hidden_layers
        return int(Bound("layer", True, 0, n - 1).parse(layer))

    def _head(self, head: int) -> int:
        n = self.session.config.num_attention_heads
        return int(Bound("head", True, 0, n - 1).parse(head))
