"""The Beams view: beam search on the page's prompt, drawn as a tree that grows step by step.

The tab lays out Run, a step slider and the views of `inspector.viz.beams`: every candidate each live beam
spawned (by step and rank, with its cumulative log-probability), which survived as a live beam, which
finished, the chosen output highlighted; and the finished hypotheses with their scores. Beam count, length
penalty and the penalties and bans come from the decoding controls of the page's settings panel
(`inspector.ui.decoding_controls`); prompt, chat toggle, system prompt and max new tokens from the page.
Every cap is checked before model work; the search (`inspector.session.beams.search`) runs on the decode
thread under the visitor's lock; the state keeps its record, which the slider redraws without model work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.errors import InputError
from inspector.session.beams import search
from inspector.ui import model_thread
from inspector.ui.admission import admit_max_new, admit_prompt
from inspector.ui.decoding_controls import settings_from_controls
from inspector.ui.fields import beam_step_bound, slider
from inspector.ui.figure import Figure
from inspector.ui.panel import Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.viz import beams as vbm
from inspector.viz.common import empty_figure

CAPTION = ("Beam search keeps the B most likely continuations at each step instead of one token: each live beam "
           "spawns candidates, the best B that have not ended live on, and a candidate that ends with EOS (or at the "
           "length limit) while among the best B becomes a finished hypothesis, ranked by its cumulative "
           "log-probability ÷ generated length^length-penalty (the transformers algorithm and defaults). Set the "
           "beams and length penalty in the page's settings panel.")


@dataclass
class BeamsState(PanelState):
    record: Any = None  # inspector.generation.beam.BeamRecord of the last search


class BeamsView(Panel):
    key = "beams"  # its tab: the view "beams" of inspector.viz.registry
    status_id = "beams-status-line"
    State = BeamsState

    def layout(self) -> None:
        import gradio as gr

        gr.Markdown(CAPTION, elem_classes="ii-caption")
        self.run_btn = gr.Button("Run beam search", variant="primary", elem_id="beams-run")
        self.show("status", gr.HTML(self.status("press Run beam search (uses the page's prompt)"),
                                    elem_id="beams-status"))
        self.show("step", slider(beam_step_bound(2), 2, 1, "tree after step", "beams-step", interactive=False))
        self.show("tree", Figure(empty_figure("The beam tree appears here"), elem_id="beams-tree", show_label=False))
        self.show("table", gr.HTML("", elem_id="beams-table"))

    def wire(self) -> None:
        p = self.page
        self.on(self.run_btn.click, self.search, [p.sid, p.prompt, p.chat, p.system, p.max_new, *p.decoding.inputs])
        self.on(self.outputs["step"].release, self.show_step, [p.sid, self.outputs["step"]], ["status", "tree"],
                trigger_mode="always_last")

    @refuses
    def search(self, sid: str | None, prompt: Any, chat: Any, system: Any, max_new: Any, *decoding: Any) -> dict[str, Any]:
        """Run button: the whole search, then the tree and the hypotheses."""
        import gradio as gr

        settings = settings_from_controls(*decoding, for_beams=True)
        if settings.num_beams < 2:
            raise InputError("beams must be at least 2 for beam search: set beams in the settings panel")
        max_new = admit_max_new(max_new, self.page.limits)
        admitted = admit_prompt(self.page.loaded, self.page.limits, prompt, bool(chat), system)
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            state.record = None
            rec = state.record = model_thread.call(search, self.page.loaded, admitted.ids, settings, max_new)
        best = rec.hypotheses[0]
        n = len(rec.steps)
        return {"status": self.status(f"{rec.num_beams} beams, {n} steps: best score {best.score:.3f}, "
                                      f"{len(best.token_ids)} tokens, finished: {rec.finish}"),
                "tree": vbm.beam_tree(rec), "step": gr.update(maximum=max(1, n), value=n, interactive=True),
                "table": vbm.beam_table_html(rec)}

    @refuses
    def show_step(self, sid: str | None, step: Any) -> dict[str, Any]:
        """The slider: the tree as it stood after that step (the last step: the whole tree, chosen output lit);
        a value outside the steps is refused by name."""
        state = self.kept(sid)
        rec = state.record if state is not None else None
        if rec is None:
            raise InputError("nothing to show yet: press Run beam search first")
        k = beam_step_bound(len(rec.steps)).parse(step)
        tree = vbm.beam_tree(rec) if k >= len(rec.steps) else vbm.beam_tree(rec, upto=max(0, k - 1))
        return {"status": self.status(f"the tree after step {k} of {len(rec.steps)}"), "tree": tree}
