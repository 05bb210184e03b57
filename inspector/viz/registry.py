"""The views, drawn once: what each view is called, its tab, and what it draws from a run at a step.

`VIEWS` maps a view's key to its `View`, in the page's tab order: its tab's label (`title`) and element id
(`tab_id`; "" for a drawing shown inside another view's tab or the token column, such as "lens" or
"kv_growth"), and the pure functions that draw it from `Picked` (a run, a forward, a position): `figure(at,
layer, head)` a plotly Figure (the inventory's: HTML), `html(at)` the HTML beside it. Everything that shows a
view reads it here and nowhere else: the page lays out a tab per `tabs()` entry (`inspector.ui.registry`;
a view with a panel of its own in `inspector.ui.views` keeps it, keyed by the view's key, and one without
gets a panel that shows its figure), `run.figure` / `run.html` dispatch through `figure` / `html`
(`inspector.api.views`), and the guided tour and the pipeline strip name a view's tab by `title` / `tab_id`
(`inspector.viz.tour`, `inspector.viz.pipeline`). A view whose `tour` text is set gets a tour step of its own.

Adding a view is a draw function and a line in `VIEWS`. This module imports no Gradio; a draw function reads
the run through `Picked.run` (the API's `Run`, or the page's run: `session`, `pieces`, `prompt_ids`,
`generated_ids`, `model`, `sample(k)`, `logit_lens(k)`, `_layer`, `_head`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.session.records import ForwardRecord
from inspector.viz import attention as va
from inspector.viz import inventory as vi
from inspector.viz import kvcache as vk
from inspector.viz import residual as vr
from inspector.viz import routing as vro
from inspector.viz import sampling as vs
from inspector.viz import stages as vst
from inspector.viz import timing as vt
from inspector.viz import tokens as vtok

SLIDING = "sliding_attention"  # a config's layer type for a sliding-window (local) layer (HF's name)


@dataclass
class Picked:
    """What a view draws from: the run, forward `k` (an index from 0), the records up to it, that forward's
    record, the position (checked by the caller) and whether it was chosen (vs the newest by default)."""

    run: Any
    k: int
    position: int
    chosen: bool

    @property
    def records(self) -> list[ForwardRecord]:
        return self.run.records[:self.k + 1]

    @property
    def rec(self) -> ForwardRecord:
        return self.run.records[self.k]

    @property
    def piece(self) -> str:
        """The selected position's token piece ("" past the pieces known)."""
        pieces = self.run.pieces
        return pieces[self.position] if self.position < len(pieces) else ""


@dataclass(frozen=True)
class View:
    """One view (see the module docstring)."""

    key: str
    title: str
    tab_id: str = ""
    figure: Callable[[Picked, int, int], Any] | None = None
    html: Callable[[Picked], str] | None = None
    tour: str = ""  # the text of a tour step of its own (a view no stage of the pipeline strip explains)
    moe_only: bool = False  # drawn for a mixture of experts only (a dense model's page has no such tab)

    def applies(self, config: Any) -> bool:
        """Whether this view is drawn for a model of `config` (a `ModelConfig`)."""
        return not self.moe_only or bool(getattr(config, "moe", False))


def newest_position(rec: ForwardRecord) -> int:
    """The newest position forward `rec` wrote (the default position of a view)."""
    return rec.start_pos + rec.n_new - 1


def _window(run: Any, layer: int) -> int | None:
    cfg = run.session.config
    return cfg.sliding_window if cfg.layer_type(layer) == SLIDING else None


def _model(run: Any) -> Any:
    if run.model is None:
        raise InputError("this trace is read-only (no model): the inventory needs the model's weights; "
                         "open it with inspector.open_trace(path, model)")
    return run.model


def _weight_bytes(run: Any) -> int | None:
    """The weights' bytes for the KV views' comparison; None for a read-only trace (no model)."""
    return None if run.model is None else run.model.inventory().bytes


# ---- figures: (at, layer, head) -> a plotly Figure
def residual_figure(p: Picked, layer: int, head: int) -> Any:
    return vr.position_chart(p.records, p.position, p.piece)


def attention_figure(p: Picked, layer: int, head: int) -> Any:
    run, cfg = p.run, p.run.session.config
    layer, head = run._layer(layer), run._head(head)
    kv_head = head // (cfg.num_attention_heads // cfg.num_key_value_heads)
    rec, col = vr.locate(p.records, p.position)
    if rec.kind == "prefill" and not p.chosen:  # the prefill's whole pattern, as the page draws it
        pattern = run.session.attention_pattern(rec.step, layer, head)  # (n_new, n_keys)
        return va.pattern_heatmap(pattern, run.pieces, rec.start_pos, layer, head, kv_head, _window(run, layer))
    row = run.session.attention_row(rec.step, layer, head, col)  # (n_keys,)
    return va.row_bars(row, run.pieces, len(run.prompt_ids), p.position, layer, head, kv_head, _window(run, layer))


def routing_figure(p: Picked, layer: int, head: int) -> Any:
    """A mixture of experts' router distribution for the position and layer (the page's Routing view)."""
    if not p.run.session.config.moe:
        raise InputError("the routing view is a mixture of experts' (mixtral, qwen3_moe, olmoe, granitemoe): "
                         "this model is dense")
    return vro.router_chart(p.records, p.position, p.run._layer(layer), p.piece)


def kv_figure(p: Picked, layer: int, head: int) -> Any:
    return vk.layer_bars(p.rec.kv)


def kv_growth_figure(p: Picked, layer: int, head: int) -> Any:
    return vk.growth_chart(p.records, _weight_bytes(p.run))


def sampling_figure(p: Picked, layer: int, head: int) -> Any:
    return vst.chain_waterfall(p.run.sample(p.k))


def timing_figure(p: Picked, layer: int, head: int) -> Any:
    return vt.timing_chart(p.records)


def inventory_html(p: Picked, layer: int = 0, head: int = 0) -> str:
    return vi.inventory_html(_model(p.run).inventory().entries, p.run.session.config.tie_word_embeddings)


# ---- HTML: at -> the HTML the page shows beside a figure
def residual_html(p: Picked) -> str:
    return vr.residual_heatmap(p.records, p.run.pieces, p.position)


def lens_html(p: Picked) -> str:
    p.run.logit_lens(p.k)  # computed now unless the run already has it, as the page does
    return vr.logit_lens_html(p.rec, p.rec.sample.token_piece if p.rec.sample else None)


def attention_html(p: Picked) -> str:
    run, cfg = p.run, p.run.session.config
    rec, col = vr.locate(p.records, p.position)
    rows = run.session.attention_overview(rec.step, col)  # (layers, heads, n_keys)
    local = [_window(run, i) is not None for i in range(cfg.num_hidden_layers)]
    n_rep = cfg.num_attention_heads // cfg.num_key_value_heads
    return va.overview_html(rows, run.pieces, n_rep, p.position, 0, 0, local if any(local) else None)


def kv_html(p: Picked) -> str:
    dtype = str(p.run.session.loaded.dtype).replace("torch.", "")
    return vk.summary_html(p.rec.kv, _weight_bytes(p.run) or 0, dtype)


def sampling_html(p: Picked) -> str:
    sample = p.run.sample(p.k)
    return vs.sampling_info_html(sample, p.rec.step) + vst.chain_table_html(sample)


def tokens_html(p: Picked) -> str:
    run, tok = p.run, p.run.session.tokenizer
    n = p.rec.start_pos + p.rec.n_new + (p.rec.sample is not None)  # positions known after forward k's draw
    ids = (run.prompt_ids + run.generated_ids)[:n]
    return vtok.token_chips_html(ids, run.pieces[:n], [tok.is_special(i) for i in ids], len(run.prompt_ids),
                                 p.position if p.chosen else None, vtok.decided_layers(p.records))


def _views(*views: View) -> dict[str, View]:
    return {v.key: v for v in views}


# key -> view, in the page's tab order (a view without `tab_id` is drawn inside another's tab)
VIEWS: dict[str, View] = _views(
    View("residual", "Residual stream", "tab-residual", residual_figure, residual_html),
    View("lens", "Logit lens", html=lens_html),  # in the Residual stream tab
    View("attention", "Attention", "tab-attention", attention_figure, attention_html),
    View("routing", "Routing", "tab-routing", routing_figure, moe_only=True),
    View("kv", "KV cache", "tab-kv", kv_figure, kv_html),
    View("kv_growth", "KV cache growth", figure=kv_growth_figure),  # in the KV cache tab
    View("sampling", "Sampling", "tab-sampling", sampling_figure, sampling_html),
    View("tokens", "Tokens", html=tokens_html),  # the token column's chips
    View("inventory", "Tensor inventory", "tab-inventory", inventory_html, inventory_html),
    View("timing", "Timing", "tab-timing", timing_figure),
    View("beams", "Beams", "tab-beams"),  # drawn by its panel from the page's beam search
)


def tabs() -> list[View]:
    """The views that have a tab of their own, in tab order."""
    return [v for v in VIEWS.values() if v.tab_id]


def view(key: str) -> View:
    """The view called `key` (a KeyError names a key that is not registered)."""
    return VIEWS[key]
