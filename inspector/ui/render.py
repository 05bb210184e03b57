"""What the page shows of one browser session's run: the token views every event updates, and the open view.

`Renderer(page).views(visitor, layer, head)` gives {view key: value}: the status line, the token chips and
text, the pipeline strip, the branch tree and the guided tour's text on every event, and the slots of the
open view tab, drawn by its panel (`ViewPanel.draw`: only the open tab's plots are drawn, so a step stays
cheap however many views exist). `blank_views()` is every view before a run. The keys are the page's
view bundle's (`inspector.ui.bundle`): `TOKEN_KEYS` and the slots of the page's view panels
(`Renderer.view_keys`: a view that does not apply to the page's model has none there, and a view narrows its
`slots` to its model's); `PLOT_KEYS` / `VIEW_KEYS` are those of every view of the registry. A big image
heatmap's hover values go beside the bundle, as a file the page fetches on hover, and a long prompt's chips
are built once per prompt (`Renderer.prompt_chips`) and travel once (`inspector.ui.bundle_parts`: `HoverFiles`,
`PromptParts`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from inspector.errors import first_line
from inspector.ui.branch_handlers import tree_html
from inspector.ui.bundle_parts import HoverFiles, PromptParts
from inspector.ui.model_thread import on_model_thread
from inspector.ui.panel import Page, ViewPanel
from inspector.ui.registry import VIEWS
from inspector.ui.visitors import Visitor
from inspector.ui.tour_panel import tour_facts
from inspector.viz import header as vh
from inspector.viz import pipeline as vp
from inspector.viz import timing as vt
from inspector.viz import tokens as vtok
from inspector.viz import tour as vtour

# What every run event updates: status line, token chips, text, pipeline strip, branches, the tour's text
TOKEN_KEYS = ("status", "chips", "text", "pipeline", "branches", "tour")
# The slots of every view tab of the registry, on any page (only the open tab's are drawn)
PLOT_KEYS = tuple(s.key for view in VIEWS if issubclass(view, ViewPanel) for s in view.slots)
VIEW_KEYS = TOKEN_KEYS + PLOT_KEYS
PROMPT_CHIPS_KEPT = 16  # prompts whose chips the renderer keeps (about 200 bytes a token)


class Renderer:
    """The views of a browser session's run over the page's model and its view panels."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.loaded, self.store = page.loaded, page.store
        self.views_by_tab = {p.key: p for p in page.panels.values() if isinstance(p, ViewPanel)}
        # the keys this page's views may update: the token views and the slots of its view panels
        self.view_keys = TOKEN_KEYS + tuple(s.key for view in self.views_by_tab.values() for s in view.slots)
        cfg = page.loaded.config
        self.facts = vp.ModelFacts(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                                   cfg.num_key_value_heads, cfg.vocab_size)
        self.tour_facts = tour_facts(page.loaded, page.inventory.bytes)
        self.hover = HoverFiles()
        self.parts = PromptParts()
        self._prompt_chips: OrderedDict[tuple, str] = OrderedDict()  # (prompt ids, selection) -> the prompt's chips
        self._chips_lock = threading.Lock()

    def blank_views(self, message: str = "", error: bool = False, visitor: Visitor | None = None) -> dict[str, Any]:
        """Every view in its empty state (page load, Reset of `visitor`)."""
        v = {"status": self.status(visitor, message, error),
             "chips": vtok.token_chips_html([], [], [], 0), "text": vtok.generated_text_html(""),
             "pipeline": vp.pipeline_html(None, self.facts), "branches": tree_html(None),
             "tour": vtour.tour_html(self.tour_facts, None)}
        for view in self.views_by_tab.values():
            v.update(view.blank())
        return v

    def status(self, visitor: Visitor | None, message: str = "", error: bool = False, pending: str = "") -> str:
        """The page's status line: the run's phase and timings, with a message, marked with the version of the
        state it shows (`Visitor.version`): the page applies no update older than the one it shows. `pending`:
        the phase is that action, asked for and not done yet (the last run's timings stay)."""
        # the version is read before whether a prefill is coming: a prefill that starts in between makes a newer
        # version (`Visitors.prefill_started`), so a "waiting" line drawn across it is known as the older one
        version = visitor.version if visitor is not None else 0
        s = visitor.session if visitor else None
        if visitor is not None and not pending and (visitor.activity == "prefill"
                                                    or self.store.prefill_coming(visitor.sid)):
            pending = "prefill"  # a view drawn while the page's new prefill is coming shows that it is
        if pending:
            records = s.records if s is not None and s.records else []
            line = vh.status_html(f"{pending}: waiting", vt.timing_stats(records), message, error)
        elif s is None or not s.records:
            line = vh.status_html("idle", vt.timing_stats([]), message, error)
        else:
            phase = vh.phase_text(len(s.records), len(s.generated_ids), visitor.max_new_tokens, s.finished,
                                  visitor.playing)
            memory = (s.retained_nbytes, self.page.limits.max_trace_mb * 2**20)
            line = vh.status_html(phase, vt.timing_stats(s.records), message, error, memory)
        return f'<span class="ii-version" hidden data-version="{version}"></span>' + line

    def error_views(self, visitor: Visitor | None, error: Exception | str) -> dict[str, Any]:
        """The status line with the message (an exception's first line); every other view stays as it is."""
        return {"status": self.status(visitor, error if isinstance(error, str) else first_line(error), error=True)}

    def ahead(self, visitor: Visitor) -> dict[str, bool]:
        """What the forward run ahead computes too for the open view (`Session.forward_ahead`'s flags): the whole
        logit lens (`lens`), every head's attention row (`overview`)."""
        view = self.views_by_tab.get(visitor.tab)
        return {"lens": bool(view is not None and view.wants_lens),
                "overview": bool(view is not None and view.wants_overview)}

    @on_model_thread
    def views(self, visitor: Visitor, layer: Any, head: Any, message: str = "", error: bool = False,
              plots: bool = True, tab: str | None = None) -> dict[str, Any]:
        """The token views always; the slots of view tab `tab` (the open tab when not given) when `plots` (the
        other tabs' are drawn when opened)."""
        s = visitor.session
        if s is None or not s.records:
            return self.blank_views(message, error, visitor)
        tok = self.loaded.tokenizer
        ids = list(s.prompt_ids) + list(s.generated_ids)
        pieces = s.token_pieces()
        rec = s.records[-1]
        if plots and s.record and rec.sample is not None and not visitor.playing:
            # the newest token's commitment layer on its chip (kept once computed; from the top layer down, not
            # the whole lens); Play's steps skip it, so it never slows Play down, and the step Play stops at gets it
            s.commitment(rec.step)
        piece = tok.decode([rec.sample.token_id]) if rec.sample else ""
        special, n_prompt = [tok.is_special(i) for i in ids], len(s.prompt_ids)
        chips = vtok.token_chips_parts(ids, pieces, special, n_prompt, visitor.selected, vtok.decided_layers(s.records),
                                       self.prompt_chips(ids, pieces, special, n_prompt, visitor.selected))
        v: dict[str, Any] = {
            "status": self.status(visitor, message, error),
            "chips": "",  # below: whole, or with the prompt's chips as a part beside it (`PromptParts`)
            "text": vtok.generated_text_html(s.text, s.finished),
            "pipeline": vp.pipeline_html(rec, self.facts, piece),
            "branches": tree_html(visitor),
            "tour": vtour.tour_html(self.tour_facts, rec, piece),  # the guided tour, with this step's numbers
        }
        v.update(self.parts.join(visitor.sid, *chips, n_prompt))
        view = self.views_by_tab.get(tab or visitor.tab)
        if plots and view is not None:
            v.update(self.hover.carry(visitor.sid, view.draw(visitor, layer, head)))
        return v

    def prompt_chips(self, ids: list[int], pieces: list[str], special: list[bool], n_prompt: int,
                     selected: int | None) -> str:
        """The prompt's chips (`vtok.prompt_chips_html`), built once per prompt and selection among them: every
        Step of a run shows the same, and at 2,840 tokens building them took 3-11 ms a Step. The latest
        `PROMPT_CHIPS_KEPT` are kept; the same string each time also keeps its part's digest (`PromptParts`)."""
        if selected is not None and not 0 <= selected < n_prompt:
            selected = None  # a selection among the generated tokens leaves the prompt's chips as they are
        key = (tuple(ids[:n_prompt]), selected)
        with self._chips_lock:
            html = self._prompt_chips.get(key)
            if html is not None:
                self._prompt_chips.move_to_end(key)
                return html
        html = vtok.prompt_chips_html(ids, pieces, special, n_prompt, selected)
        with self._chips_lock:
            self._prompt_chips[key] = html
            while len(self._prompt_chips) > PROMPT_CHIPS_KEPT:
                self._prompt_chips.popitem(last=False)
        return html

    @staticmethod
    def drawn_marker(visitor: Visitor) -> str:
        """A hidden element naming the step and tab the plots were drawn for (tests and bench wait on it)."""
        n = len(visitor.session.records) if visitor.session is not None else 0
        return f'<span id="views-drawn-step" data-step="{n - 1}" data-tab="{visitor.tab}"></span>'
