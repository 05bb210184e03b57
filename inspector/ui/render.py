"""What the page shows for one browser session: the engine's records -> every view's component value.

`Views` is the rendering half of the app's handlers (`inspector.ui.handlers.Handlers` extends it): status
line, token chips and text, and the plots of the open view tab, built by `inspector.viz`. The session's
on-demand computations (attention rows, logit lens) run on the model thread.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from inspector.errors import first_line
from inspector.ui.app_model import AppLimits
from inspector.ui.branch_handlers import tree_html
from inspector.ui.fields import head_bound, layer_bound
from inspector.ui.model_thread import on_model_thread
from inspector.ui.sessions import Entry, SessionStore
from inspector.ui.tour_panel import tour_facts
from inspector.viz import attention as va
from inspector.viz import branches as vb
from inspector.viz import header as vh
from inspector.viz import kvcache as vk
from inspector.viz import pipeline as vp
from inspector.viz import residual as vr
from inspector.viz import sampling as vs
from inspector.viz import stages as vst
from inspector.viz import timing as vt
from inspector.viz import tokens as vtok
from inspector.viz import tour as vtour
from inspector.viz.common import empty_figure

# Order of the view outputs every step handler returns (the app wires components in this order).
VIEW_KEYS = ("status", "chips", "text", "pipeline", "branches", "tour", "resid_heat", "resid_pos", "lens", "attn_fig",
             "attn_overview", "attn_info", "kv_bars", "kv_growth", "kv_summary", "kv_recompute", "samp_fig", "samp_info",
             "timing_fig")
TOKEN_KEYS = VIEW_KEYS[:6]  # what every step updates: status line, token chips, text, pipeline strip, branches, tour
PLOT_KEYS = VIEW_KEYS[6:]  # the views in tabs: only the open tab's are drawn
BRANCH_CHOICES = 10  # candidates offered as "what if it had picked..." buttons in the Sampling view


class Views:
    """Rendering over one loaded model and a session store."""

    view_keys = VIEW_KEYS

    def __init__(self, loaded: Any, store: SessionStore, limits: AppLimits, inventory: list, weight_bytes: int) -> None:
        self.loaded = loaded
        self.store = store
        self.limits = limits
        self.inventory = inventory
        self.weight_bytes = weight_bytes
        cfg = loaded.config
        self.n_rep = cfg.num_attention_heads // cfg.num_key_value_heads
        self.facts = vp.ModelFacts(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                                   cfg.num_key_value_heads, cfg.vocab_size)
        self.tour_facts = tour_facts(loaded)

    def blank_views(self, message: str = "", error: bool = False) -> list:
        """Every view in its empty state (page load, Reset)."""
        hint = "Type a prompt and press Prefill"
        v = {
            "status": vh.status_html("idle", vt.timing_stats([]), message, error),
            "chips": vtok.token_chips_html([], [], [], 0), "text": vtok.generated_text_html(""),
            "pipeline": vp.pipeline_html(None, self.facts), "branches": tree_html(None),
            "tour": vtour.tour_html(self.tour_facts, None),
            "resid_heat": "", "resid_pos": empty_figure(hint), "lens": "",
            "attn_fig": empty_figure(hint), "attn_overview": "",
            "attn_info": va.kv_groups_html(self.loaded.config.num_attention_heads,
                                           self.loaded.config.num_key_value_heads),
            "kv_bars": empty_figure(hint), "kv_growth": empty_figure(hint), "kv_summary": "",
            "kv_recompute": vk.recompute_html(0.0, None, 0), "samp_fig": empty_figure(hint), "samp_info": "",
            "timing_fig": empty_figure(hint),
        }
        return [v[k] for k in VIEW_KEYS]

    def status(self, entry: Entry | None, message: str = "", error: bool = False) -> str:
        s = entry.session if entry else None
        if s is None or not s.records:
            return vh.status_html("idle", vt.timing_stats([]), message, error)
        phase = vh.phase_text(len(s.records), len(s.generated_ids), entry.max_new_tokens, s.finished, entry.playing)
        memory = (s.retained_nbytes, self.limits.max_trace_mb * 2**20)
        return vh.status_html(phase, vt.timing_stats(s.records), message, error, memory)

    def window(self, layer: int) -> int | None:
        """The window of a local (sliding-window) layer, None for a global one."""
        cfg = self.loaded.config
        return cfg.sliding_window if cfg.layer_type(layer) == "sliding_attention" else None

    def attention_views(self, entry: Entry, layer: int, head: int) -> tuple:
        """Pattern (prefill) or row (decode) of the selected position's forward, overview, info."""
        s = entry.session
        cfg = self.loaded.config
        layer, head = layer_bound(cfg).parse(layer), head_bound(cfg).parse(head)  # refused, never clamped
        pos = self.selected_position(entry)
        rec, col = vr.locate(s.records, pos)
        pieces = s.token_pieces()
        kv_head = head // self.n_rep
        if rec.kind == "prefill" and entry.selected is None:
            pat = s.attention_pattern(rec.step, layer, head)  # (n_new, n_keys)
            fig = va.pattern_heatmap(pat, pieces, rec.start_pos, layer, head, kv_head, self.window(layer))
            n_keys = pat.shape[1]
        else:
            row = s.attention_row(rec.step, layer, head, col)  # (n_keys,)
            fig = va.row_bars(row, pieces, len(s.prompt_ids), pos, layer, head, kv_head, self.window(layer))
            n_keys = row.shape[0]
        rows = s.attention_overview(rec.step, col)  # (L, H, n_keys)
        local = [self.window(i) is not None for i in range(cfg.num_hidden_layers)]
        over = va.overview_html(rows, pieces, self.n_rep, pos, layer, head, local if any(local) else None)
        groups = rec.kv[layer].kv_head_groups if rec.kv else None
        info = (f'<div id="attention-info" data-keys="{n_keys}" data-query="{pos}">Query position {pos}: '
                f'attends over <b id="attention-keys">{n_keys}</b> keys ({rec.kind} step {rec.step}).</div>'
                + va.kv_groups_html(cfg.num_attention_heads, cfg.num_key_value_heads, groups, head))
        return fig, over, info

    def selected_position(self, entry: Entry) -> int:
        last = entry.session.records[-1]
        newest = last.start_pos + last.n_new - 1
        if entry.selected is None or not (0 <= entry.selected <= newest):
            return newest
        return entry.selected

    def sampling_views(self, entry: Entry) -> tuple:
        s = entry.session
        rec = s.records[-1]
        if entry.preview is not None:
            actual = rec.sample.token_id if rec.sample else None
            return (vst.chain_waterfall(entry.preview, preview=True),
                    vs.sampling_info_html(entry.preview, rec.step, preview_of=actual) + vst.chain_table_html(entry.preview))
        if rec.sample is None:
            return empty_figure("no sample recorded"), ""
        top = [(c.id, c.piece, c.prob_raw) for c in rec.sample.candidates[:BRANCH_CHOICES]]
        info = (vs.sampling_info_html(rec.sample, rec.step) + vst.chain_table_html(rec.sample)
                + vb.force_buttons_html(rec.step, top, rec.sample.token_id))
        return vst.chain_waterfall(rec.sample), info

    @on_model_thread
    def views(self, entry: Entry, layer: int, head: int, message: str = "", error: bool = False,
              plots: bool = True) -> list:
        """Status, tokens and text always; the plots of the open tab only (the others are left as they are
        and redrawn when their tab is opened): every step stays cheap however many views exist."""
        return self._views(entry, layer, head, message, error, plots)

    def _views(self, entry: Entry, layer: int, head: int, message: str, error: bool, plots: bool) -> list:
        s = entry.session
        if s is None or not s.records:
            return self.blank_views(message, error)
        tok = self.loaded.tokenizer
        ids = list(s.prompt_ids) + list(s.generated_ids)
        pieces = s.token_pieces()
        rec = s.records[-1]
        if plots and s.record and rec.sample is not None and not entry.playing:
            # the newest token's commitment layer on its chip (kept once computed; from the top layer down, not
            # the whole lens); Play's steps skip it, so it never slows Play down, and the step Play stops at gets it
            s.commitment(rec.step)
        piece = tok.decode([rec.sample.token_id]) if rec.sample else ""
        v: dict[str, Any] = {
            "status": self.status(entry, message, error),
            "chips": vtok.token_chips_html(ids, pieces, [tok.is_special(i) for i in ids], len(s.prompt_ids),
                                           entry.selected, vtok.decided_layers(s.records)),
            "text": vtok.generated_text_html(s.text, s.finished),
            "pipeline": vp.pipeline_html(rec, self.facts, piece),
            "branches": tree_html(entry),
            "tour": vtour.tour_html(self.tour_facts, rec, piece),  # the guided tour, with this step's numbers
        }
        if not plots:
            return [v.get(k, gr.skip()) for k in VIEW_KEYS]
        if entry.tab == "residual":
            pos = self.selected_position(entry)
            v["resid_heat"] = vr.residual_heatmap(s.records, pieces, pos)
            v["resid_pos"] = vr.position_chart(s.records, pos, pieces[pos] if pos < len(pieces) else "")
            # the lens (an LM-head matmul per layer) is computed on first request unless it ran ahead, then kept
            s.logit_lens(rec.step)
            v["lens"] = vr.logit_lens_html(rec, rec.sample.token_piece if rec.sample else None)
        elif entry.tab == "attention":
            v["attn_fig"], v["attn_overview"], v["attn_info"] = self.attention_views(entry, layer, head)
        elif entry.tab == "kv":
            v["kv_bars"] = vk.layer_bars(rec.kv)
            v["kv_growth"] = vk.growth_chart(s.records, self.weight_bytes)
            v["kv_summary"] = vk.summary_html(rec.kv, self.weight_bytes, str(self.loaded.dtype).replace("torch.", ""))
            v["kv_recompute"] = vk.recompute_html(rec.forward_ms, entry.uncached_ms, rec.start_pos + rec.n_new)
        elif entry.tab == "sampling":
            v["samp_fig"], v["samp_info"] = self.sampling_views(entry)
        elif entry.tab == "timing":
            v["timing_fig"] = vt.timing_chart(s.records)
        return [v.get(k, gr.skip()) for k in VIEW_KEYS]

    def error_views(self, entry: Entry | None, error: Exception | str) -> list:
        """Status line with the message (an exception's first line); every other view left as it is."""
        msg = error if isinstance(error, str) else first_line(error)
        return [self.status(entry, msg, error=True)] + [gr.skip()] * (len(VIEW_KEYS) - 1)

    # ---------- model events ----------
    @staticmethod
    def drawn_marker(entry: Entry) -> str:
        """A hidden element naming the step and tab the plots were drawn for (tests and bench wait on it)."""
        n = len(entry.session.records) if entry.session is not None else 0
        return f'<span id="views-drawn-step" data-step="{n - 1}" data-tab="{entry.tab}"></span>'
