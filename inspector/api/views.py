"""The page's views of a `Run`, drawn by the page's own builders (`inspector.viz`), called as
`inspector.ui.render` calls them for the open tab, with a run's records up to the forward asked for.

`figure(run, view, step)` returns a plotly Figure (`FIGURES`); `html(run, view, step)` the HTML the page
shows beside it (`HTMLS`), wrapped in `Html` so a notebook renders it inline. Importing this module
imports plotly (the viz builders); `inspector` imports it only when a view is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

import plotly.graph_objects as go

from inspector.engine.config import SLIDING
from inspector.api.args import index
from inspector.errors import InputError
from inspector.validate import shown
from inspector.viz import attention as va
from inspector.viz import inventory as vi
from inspector.viz import kvcache as vk
from inspector.viz import residual as vr
from inspector.viz import routing as vro
from inspector.viz import sampling as vs
from inspector.viz import stages as vst
from inspector.viz import timing as vt
from inspector.viz import tokens as vtok

if TYPE_CHECKING:
    from inspector.session.records import ForwardRecord


class Run(Protocol):
    """What the views read of a run (`inspector.api.run.Run`, which imports this module: a protocol, so no
    import goes back)."""

    session: Any
    model: Any
    prompt_ids: list[int]
    generated_ids: list[int]
    pieces: list[str]
    records: list[ForwardRecord]

    def forward_index(self, step: int) -> int: ...
    def logit_lens(self, step: int = -1) -> Any: ...
    def sample(self, step: int = -1) -> Any: ...
    def _layer(self, layer: int) -> int: ...
    def _head(self, head: int) -> int: ...


class Html(str):
    """HTML from the page's builders; a notebook shows it inline (`_repr_html_`), `str(h)` is the markup."""

    def _repr_html_(self) -> str:
        return str(self)


class Picked:
    """What one view draws: the run, its records up to forward `k`, that forward's record, the position."""

    def __init__(self, run: Run, step: int, position: int | None) -> None:
        self.run, self.k = run, run.forward_index(step)
        self.records: list[ForwardRecord] = run.records[:self.k + 1]
        self.rec = self.records[-1]
        newest = self.rec.start_pos + self.rec.n_new - 1
        self.position = newest if position is None else index(position, "position", newest + 1)  # negative: from the end
        self.chosen = position is not None  # the page's selected position (decode rows) vs the prefill pattern


def _residual(p: Picked, layer: int, head: int) -> go.Figure:
    pieces = p.run.pieces
    return vr.position_chart(p.records, p.position, pieces[p.position] if p.position < len(pieces) else "")


def _window(run: Run, layer: int) -> int | None:
    cfg = run.session.config
    return cfg.sliding_window if cfg.layer_type(layer) == SLIDING else None


def _attention(p: Picked, layer: int, head: int) -> go.Figure:
    run, cfg = p.run, p.run.session.config
    layer, head = run._layer(layer), run._head(head)
    kv_head = head // (cfg.num_attention_heads // cfg.num_key_value_heads)
    rec, col = vr.locate(p.records, p.position)
    if rec.kind == "prefill" and not p.chosen:  # the prefill's whole pattern, as the page draws it
        pattern = run.session.attention_pattern(rec.step, layer, head)  # (n_new, n_keys)
        return va.pattern_heatmap(pattern, run.pieces, rec.start_pos, layer, head, kv_head, _window(run, layer))
    row = run.session.attention_row(rec.step, layer, head, col)  # (n_keys,)
    return va.row_bars(row, run.pieces, len(run.prompt_ids), p.position, layer, head, kv_head, _window(run, layer))


def _kv(p: Picked, layer: int, head: int) -> go.Figure:
    return vk.layer_bars(p.rec.kv)


def _kv_growth(p: Picked, layer: int, head: int) -> go.Figure:
    return vk.growth_chart(p.records, _weight_bytes(p.run))


def _sampling(p: Picked, layer: int, head: int) -> go.Figure:
    return vst.chain_waterfall(p.run.sample(p.k))


def _timing(p: Picked, layer: int, head: int) -> go.Figure:
    return vt.timing_chart(p.records)


def _routing(p: Picked, layer: int, head: int) -> go.Figure:
    """A mixture of experts' router distribution for the position and layer (the page's Routing view)."""
    if not p.run.session.config.moe:
        raise InputError("the routing view is a mixture of experts' (mixtral, qwen3_moe, olmoe, granitemoe): "
                         "this model is dense")
    layer = p.run._layer(layer)
    pieces = p.run.pieces
    return vro.router_chart(p.records, p.position, layer, pieces[p.position] if p.position < len(pieces) else "")


def _inventory(p: Picked, layer: int | None = None, head: int = 0) -> Html:
    return Html(vi.inventory_html(_model(p.run).inventory().entries, p.run.session.config.tie_word_embeddings))


# view name -> builder call (a figure, or for the inventory the page's HTML table)
FIGURES: dict[str, Callable[[Picked, int, int], Any]] = {
    "residual": _residual,
    "attention": _attention,
    "kv": _kv,
    "kv_growth": _kv_growth,
    "sampling": _sampling,
    "timing": _timing,
    "inventory": _inventory,
    "routing": _routing,
}


def figure(run: Run, view: str, step: int = -1, *, layer: int = 0, head: int = 0,
           position: int | None = None) -> go.Figure | Html:
    """The page's figure `view` after forward `step` (see `Run.figure`)."""
    build = FIGURES.get(view) if isinstance(view, str) else None
    if build is None:
        raise InputError(f"unknown view {shown(view)}: the views are {', '.join(FIGURES)}")
    return build(Picked(run, step, position), layer, head)


def _residual_html(p: Picked) -> str:
    return vr.residual_heatmap(p.records, p.run.pieces, p.position)


def _lens_html(p: Picked) -> str:
    p.run.logit_lens(p.k)  # computed now unless the run already has it, as the page does
    return vr.logit_lens_html(p.rec, p.rec.sample.token_piece if p.rec.sample else None)


def _attention_html(p: Picked) -> str:
    run, cfg = p.run, p.run.session.config
    rec, col = vr.locate(p.records, p.position)
    rows = run.session.attention_overview(rec.step, col)  # (layers, heads, n_keys)
    local = [_window(run, i) is not None for i in range(cfg.num_hidden_layers)]
    n_rep = cfg.num_attention_heads // cfg.num_key_value_heads
    return va.overview_html(rows, run.pieces, n_rep, p.position, 0, 0, local if any(local) else None)


def _kv_html(p: Picked) -> str:
    dtype = str(p.run.session.loaded.dtype).replace("torch.", "")
    return vk.summary_html(p.rec.kv, _weight_bytes(p.run) or 0, dtype)


def _sampling_html(p: Picked) -> str:
    sample = p.run.sample(p.k)
    return vs.sampling_info_html(sample, p.rec.step) + vst.chain_table_html(sample)


def _tokens_html(p: Picked) -> str:
    run, tok = p.run, p.run.session.tokenizer
    n = p.rec.start_pos + p.rec.n_new + (p.rec.sample is not None)  # positions known after forward k's draw
    ids = (run.prompt_ids + run.generated_ids)[:n]
    return vtok.token_chips_html(ids, run.pieces[:n], [tok.is_special(i) for i in ids], len(run.prompt_ids),
                                 p.position if p.chosen else None, vtok.decided_layers(p.records))


HTMLS: dict[str, Callable[[Picked], str]] = {
    "residual": _residual_html,
    "lens": _lens_html,
    "attention": _attention_html,
    "kv": _kv_html,
    "sampling": _sampling_html,
    "tokens": _tokens_html,
    "inventory": lambda p: str(_inventory(p)),
}


def html(run: Run, view: str, step: int = -1, *, position: int | None = None) -> Html:
    """The page's HTML `view` after forward `step` (see `Run.html`)."""
    build = HTMLS.get(view) if isinstance(view, str) else None
    if build is None:
        raise InputError(f"unknown HTML view {shown(view)}: the HTML views are {', '.join(HTMLS)}")
    return Html(build(Picked(run, step, position)))


def _model(run: Run) -> Any:
    if run.model is None:
        raise InputError("this trace is read-only (no model): the inventory needs the model's weights; "
                         "open it with inspector.open_trace(path, model)")
    return run.model


def _weight_bytes(run: Run) -> int | None:
    """The weights' bytes for the KV views' comparison; None for a read-only trace (no model)."""
    return None if run.model is None else run.model.inventory().bytes
