"""The Attention view's head atlas section: what each head of the page's model does, and what breaks without it.

The section lays out, inside the Attention view, the probe (probe length n, probes K, seed: the CLI's
defaults, `inspector heads`) and "Compute the atlas": every head's four scores on K sequences of n random
tokens repeated once (`inspector.analysis.heads.atlas`, on the model thread, kept per model and probe by the
analysis), drawn as the layers x heads map coloured by each head's strongest role, and the legend naming the
probe. A click on a head of the map (static/app.js sends "L.H" to a hidden request box) shows its pattern on
the probe beside its pattern on the page's run (one line saying to press Prefill when there is none), its
previous-token and first-token scores on the run, and moves the view's layer and head sliders to it.

The causal check, for a role and k: "Ablate" gives the probe's loss on its first and repeated copy with no
head off, the top-k heads of the role off and k random other heads off (seeded by the probe's seed, as the
CLI draws them); "Ablate in this run" makes the page's run again with the top-k heads off and again with the
k random heads off (`inspector.analysis.heads_ablation.ablate_in_run`, through the interventions lever), each
from the run as it was and each a branch of it in the page's branch tree; the run then holds the top-k
branch, and the next-token distributions of the three are drawn side by side. Every control is refused by
name (`inspector.ui.fields`, `heads_ablation.check_k`); a probe past the context window is refused with the
longest that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inspector.analysis import heads, heads_ablation
from inspector.analysis.head_findings import ROLE_NAMES, ROLES, HeadAblation, HeadAtlas, HeadPattern, Probe, \
    RunAblation
from inspector.errors import InputError
from inspector.session.branches import MAX_BRANCHES
from inspector.ui import model_thread
from inspector.ui.fields import HEAD_PROBE_LEN, HEAD_PROBES, FreeNumber, head_bound, layer_bound
from inspector.ui.figure import Figure
from inspector.ui.labs.interventions import tree_of
from inspector.ui.panel import Panel, PanelState
from inspector.ui.refusals import refuses
from inspector.ui.visitors import Visitor
from inspector.validate import SEED
from inspector.viz import heads as vh
from inspector.viz.common import empty_figure

CAPTION = ("Where each head's attention goes on random tokens repeated once, scored for four patterns the literature "
           "names: the scores measure attention only, not what a head writes. On random tokens a head with nothing "
           "to read rests on the first position, so a first-token colour means idle on this probe. Click a head of "
           "the map to see its pattern; ablate the strongest heads of a role and see what the model loses, beside "
           "as many random heads: that tests what they do.")
LISTED = 6  # heads named in a branch's label (more: only how many)


@dataclass
class HeadAtlasState(PanelState):
    """The atlas shown, the head clicked, the last ablations (the atlas is the analysis's, kept per model and
    probe for the process: counted here too, a few kilobytes)."""

    atlas: HeadAtlas | None = None
    head: tuple[int, int] | None = None
    patterns: tuple[HeadPattern, HeadPattern | None] | None = None  # on the probe, on the run
    ablation: HeadAblation | None = None
    in_run: tuple[RunAblation, RunAblation] | None = None  # the top-k heads off, k random heads off


def parse_head(config: Any, request: Any) -> tuple[int, int]:
    """"L.H" (what the map's click sends) -> (layer, head) of the model; InputError otherwise."""
    layer, dot, head = str(request or "").strip().partition(".")
    if not dot:
        raise InputError(f"a head is 'layer.head', e.g. '3.1', got {str(request)[:40]!r}")
    return int(layer_bound(config).parse(layer)), int(head_bound(config).parse(head))


def branch_label(what: str, chosen: list[tuple[int, int]]) -> str:
    """"top 2 induction heads off (1.0, 2.1)": the heads named when there are few."""
    named = f" ({', '.join(f'{L}.{h}' for L, h in chosen)})" if len(chosen) <= LISTED else ""
    return f"{what} off{named}"


class HeadAtlasSection(Panel):
    """Part of the Attention view (not a tab of its own): see the module docstring."""

    key, title, tab_id = "head_atlas", "Head atlas", "heads-panel"
    status_id = "heads-status-line"
    State = HeadAtlasState

    def layout(self) -> None:
        import gradio as gr

        cfg = self.page.loaded.config
        with gr.Accordion("Head atlas: where each head's attention goes, and what the model loses without it", open=True,
                          elem_id=self.tab_id):
            gr.Markdown(CAPTION, elem_classes="ii-caption")
            self.show("status", gr.HTML(self.status("press Compute the atlas"), elem_id="heads-status"))
            with gr.Row():
                self.n = FreeNumber(heads.DEFAULT_N, label=HEAD_PROBE_LEN.name, precision=0, elem_id="heads-n")
                self.count = FreeNumber(heads.DEFAULT_PROBES, label=HEAD_PROBES.name, precision=0,
                                        elem_id="heads-k-probes")
                self.seed = FreeNumber(heads.DEFAULT_SEED, label=SEED.name, precision=0, elem_id="heads-seed")
                self.compute_btn = gr.Button("Compute the atlas", variant="primary", elem_id="heads-compute")
            self.show("map", Figure(empty_figure("Press Compute the atlas: every head of the model, scored"),
                                    show_label=False, elem_id="heads-map"))
            self.show("legend", gr.Markdown("", elem_id="heads-legend"))
            # what static/app.js sends for a click on a head of the map ("L.H")
            self.request = gr.Textbox(elem_id="heads-head-request", elem_classes="ii-offscreen", container=False)
            self.show("pair", Figure(empty_figure("Click a head of the map to see its pattern"), show_label=False,
                                     elem_id="heads-pattern"))
            with gr.Row():
                self.role = gr.Dropdown([(ROLE_NAMES[r], r) for r in ROLES], value="induction", label="role",
                                        elem_id="heads-role")
                L, H = cfg.num_hidden_layers, cfg.num_attention_heads
                self.k = FreeNumber(min(5, L * H // 2), label=f"top-k (1-{L * H // 2})", precision=0,
                                    elem_id="heads-top-k")
                self.ablate_btn = gr.Button("Ablate", elem_id="heads-ablate")
                self.in_run_btn = gr.Button("Ablate in this run", elem_id="heads-ablate-run")
            with gr.Row():
                self.show("ablation", Figure(empty_figure("Ablate: the probe's loss without the heads"),
                                             show_label=False, elem_id="heads-ablation"))
                self.show("in_run", Figure(empty_figure("Ablate in this run: the next token without the heads"),
                                           show_label=False, elem_id="heads-run-ablation"))
        self.show("layer", self.page.layer)  # a clicked head moves the view's sliders to it
        self.show("head", self.page.head)

    def wire(self) -> None:
        p = self.page
        probe = [p.sid, self.n, self.count, self.seed]
        self.on(self.compute_btn.click, self.compute, probe, ["status", "map", "legend"])
        clicked = self.on(self.request.input, self.show_head, [p.sid, self.request],
                          ["status", "pair", "layer", "head"])
        self.on(self.ablate_btn.click, self.ablate, [*probe, self.role, self.k],
                ["status", "map", "legend", "ablation"])
        ablated = self.on(self.in_run_btn.click, self.ablate_in_run, [*probe, self.role, self.k],
                          ["status", "map", "legend", "in_run"])
        # then the page's views: the Attention view at the clicked head; the run's tokens and branch tree
        for event, name in ((clicked, "heads_redraw_head"), (ablated, "heads_redraw_run")):
            p.handlers.on(event.then, p.handlers.redraw_tab("attention"), [p.sid, p.layer, p.head], api_name=name)

    # ---- helpers
    def _probe(self, n: Any, count: Any, seed: Any) -> Probe:
        """The probe the controls describe, for the page's model (refused by name, or past its context)."""
        n, count, seed = HEAD_PROBE_LEN.parse(n), HEAD_PROBES.parse(count), SEED.parse(seed)
        return heads.model_probe(self.page.loaded, n, count, seed)

    def _atlas_views(self, state: HeadAtlasState, atlas: HeadAtlas) -> dict[str, Any]:
        state.atlas = atlas
        return {"map": vh.atlas_figure(atlas), "legend": vh.legend_text(atlas.probe)}

    def _run_visitor(self, sid: str | None) -> Visitor:
        visitor = self.page.store.get(sid)
        if visitor is None or visitor.session is None or not visitor.session.records:
            raise InputError("nothing to ablate in yet: press Prefill on the page first")
        return visitor

    # ---- handlers
    @refuses
    def compute(self, sid: str | None, n: Any, count: Any, seed: Any) -> dict[str, Any]:
        """Compute the atlas: every head's four scores on the probe (kept per model and probe)."""
        probe = self._probe(n, count, seed)
        model = self.page.loaded.model
        kept = heads.cached(model, probe) is not None
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            atlas = model_thread.call(heads.atlas, model, probe)
        layers, per_layer = atlas.shape
        strongest = "; ".join(f"{ROLE_NAMES[r]} {L}.{h} ({v:.2f})" for r in ROLES for L, h, v in atlas.top(r, 1))
        when = "kept from an earlier computation" if kept else f"in {atlas.seconds:.1f} s"
        message = (f"{layers * per_layer} heads scored on {probe.count} x {probe.length} tokens ({when}); strongest: "
                   f"{strongest}")
        return {"status": self.status(message), **self._atlas_views(state, atlas)}

    def _patterns(self, visitor: Visitor, probe: Probe, layer: int, head: int) -> tuple[HeadPattern, Any, Any]:
        """On the model thread: the head's pattern on the probe's first sequence, and on the page's run with
        the run's previous-token and first-token scores (None, None without a run)."""
        on_probe = heads.probe_pattern(self.page.loaded, probe, layer, head)
        s = visitor.session
        if s is None or not s.records:
            return on_probe, None, None
        return on_probe, heads.run_pattern(s, layer, head), heads.run_scores(s)

    @refuses
    def show_head(self, sid: str | None, request: Any) -> dict[str, Any]:
        """A click on a head of the map: its patterns, and the view's sliders moved to it."""
        layer, head = parse_head(self.page.loaded.config, request)
        state = self.kept(sid)
        if state is None or state.atlas is None:
            raise InputError("no atlas yet: press Compute the atlas, then click a head")
        visitor, _ = self.state(sid)
        with visitor.exclusive(self.key):
            on_probe, on_run, scores = model_thread.call(self._patterns, visitor, state.atlas.probe, layer, head)
        state.head, state.patterns = (layer, head), (on_probe, on_run)
        a = state.atlas
        probe_scores = ", ".join(f"{ROLE_NAMES[r]} {a.scores[r][layer, head]:.2f}" for r in ROLES)
        if scores is None:
            run = "press Prefill on the page to see it on your own text beside the probe"
        else:
            run = (f"on this run ({scores.tokens} tokens): " + ", ".join(
                f"{ROLE_NAMES[r]} {scores.scores[r][layer, head]:.2f}" for r in ("previous_token", "first_token")))
        return {"status": self.status(f"head {layer}.{head} on the probe: {probe_scores}; {run}"),
                "pair": vh.pattern_pair_figure(on_probe, on_run), "layer": layer, "head": head}

    def _checked(self, role: Any, k: Any) -> tuple[str, int]:
        return heads.check_role(role), heads_ablation.check_k(self.page.loaded.config, k)

    @refuses
    def ablate(self, sid: str | None, n: Any, count: Any, seed: Any, role: Any, k: Any) -> dict[str, Any]:
        """Ablate: the probe's loss by copy with no head, the top-k heads of the role, k random heads off."""
        probe = self._probe(n, count, seed)
        role, k = self._checked(role, k)
        model = self.page.loaded.model
        visitor, state = self.state(sid)
        with visitor.exclusive(self.key):
            atlas = model_thread.call(heads.atlas, model, probe)
            result = model_thread.call(heads_ablation.ablation, model, atlas, role, k, probe.seed)
        state.ablation = result
        none, top, rand = result.rows
        message = (f"loss on the repeated copy {none.loss_repeat:.2f} nats with every head, {top.loss_repeat:.2f} "
                   f"without the {top.label}, {rand.loss_repeat:.2f} without {rand.label} (first copy "
                   f"{none.loss_first:.2f}; {result.seconds:.1f} s)")
        return {"status": self.status(message), **self._atlas_views(state, atlas),
                "ablation": vh.ablation_figure(result)}

    def _in_run(self, visitor: Visitor, top: list[tuple[int, int]], rand: list[tuple[int, int]],
                labels: tuple[str, str]) -> tuple[RunAblation, RunAblation, str]:
        """On the model thread: the page's run again with the random heads off, then with the top-k heads off,
        each from the run as it was and a branch of it; the run holds the top-k branch after."""
        s = visitor.session
        tree = tree_of(visitor)
        if len(tree) + 2 > MAX_BRANCHES:
            raise InputError(f"this run has {len(tree)} branches and keeps at most {MAX_BRANCHES}: press Prefill "
                             "to start over")
        origin, before = tree.current, heads_ablation.run_before(s)
        rand_rec, rand_levers = heads_ablation.ablate_in_run(s, rand, labels[1], before)
        b_rand = tree.fork_levers(labels[1], rand_levers, s.generated_ids, s.text)
        tree.current = origin  # both branch off the run as it was (the session is run again from its prompt)
        top_rec, top_levers = heads_ablation.ablate_in_run(s, top, labels[0], before)
        b_top = tree.fork_levers(labels[0], top_levers, s.generated_ids, s.text)
        visitor.preview = visitor.uncached_ms = None
        n = len(s.generated_ids)
        return top_rec, rand_rec, (f"branch #{b_top.id}: {labels[0]}, beside #{b_rand.id}: {labels[1]}; the page's "
                                   f"run is #{b_top.id} now ({n} token{'s' if n != 1 else ''} run again)")

    @refuses
    def ablate_in_run(self, sid: str | None, n: Any, count: Any, seed: Any, role: Any, k: Any) -> dict[str, Any]:
        """Ablate in this run: the page's run with the top-k heads off and with k random heads off, as branches."""
        probe = self._probe(n, count, seed)
        role, k = self._checked(role, k)
        visitor = self._run_visitor(sid)
        _, state = self.state(sid)
        model, cfg = self.page.loaded.model, self.page.loaded.config
        with visitor.exclusive(self.key):
            atlas = model_thread.call(heads.atlas, model, probe)
            top = [(L, h) for L, h, _ in atlas.top(role, k)]
            rand = heads_ablation.random_heads(cfg, top, k, probe.seed)
            labels = (branch_label(f"top {k} {ROLE_NAMES[role]} heads", top), branch_label(f"{k} random heads", rand))
            top_rec, rand_rec, message = model_thread.call(self._in_run, visitor, top, rand, labels)
        state.in_run = (top_rec, rand_rec)
        return {"status": self.status(message), **self._atlas_views(state, atlas),
                "in_run": vh.run_ablation_figure(top_rec, rand_rec)}
