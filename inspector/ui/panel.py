"""A panel is one view or lab of the page: its tab, what it shows (named outputs), its typed per-browser
state, its handlers and how it refuses. `build_app` lays out and wires every panel the registry lists
(`inspector.ui.registry`); nothing else knows a panel's components or reaches into its state.

The contract of a panel class (a subclass of `Panel`):
- `key` names it: its line in the registry, its state in a browser session (`Visitor.labs[key]`), the id
  of its status line (`status_id`). `title` and `tab_id` are its tab's label and element id: a view's are
  read from the registry of views (`inspector.viz.registry`) by its key, so its panel names only the key.
- `applies(loaded)` (a classmethod; True by default) says whether the panel is on the page of that model:
  `registry.build_panels` makes only the panels that apply and the page lays out only their tabs (the
  Routing view applies to a mixture of experts only, so a dense model's page has no Routing tab).
- `layout()` runs inside its `gr.Tab`: it lays out its components and registers each output by name
  (`self.show("status", gr.HTML(...))`). `wire()` runs once every panel is laid out and binds its events
  with `self.on(trigger, handler, inputs)`, whose outputs are the panel's registered outputs.
- A handler is a method that returns {output name: value}; an output it does not name stays as it is.
  `@refuses` (`inspector.ui.refusals`) makes a refusal (an `InspectorError` such as bad input or a cap, or
  a ValueError from a layer below) return {"status": the panel's status line with the message} and change
  nothing else (a view panel's: the page's status line).
  A generator handler streams (Play): each yield is one update.
- `State` (a `PanelState` dataclass) is what the panel keeps per browser session, made on first use by
  `self.state(sid)`; its `nbytes()` counts the memory it holds, which admission adds to the session's
  (`inspector.ui.admission.held_nbytes`). A panel without per-session state keeps `State = None`.
- Model work goes through `inspector.ui.model_thread` under the visitor's lock (`visitor.exclusive`); every
  cap is checked before it (`inspector.ui.admission`). No tensor math: figures come from `inspector.viz`.

`Page` holds what panels share: the model, the visitor store, the caps and the page-wide inputs (the
session id, prompt, chat toggle, system prompt, sampling controls, max new tokens, the decoding settings'
controls, the attention view's layer and head). Tests build one without a browser (`Page.bare`). The caps
are the store's (`page.limits` is `store.limits`, one object for the whole app): every handler reads them
when it runs, so caps put in place on a live app apply from its next event.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property, wraps
from typing import Any, ClassVar

from inspector.ui.app_model import AppLimits
from inspector.ui.refusals import REFUSALS, refuses
from inspector.ui.visitors import Visitor, Visitors
from inspector.viz import registry as view_registry
from inspector.viz.common import status_line_html

# Events of the page: no progress overlay, not listed in the script API, never queued behind each other's
# concurrency group (each session runs one model call at a time anyway: `Visitor.exclusive`).
EVENT_DEFAULTS = {"show_progress": "hidden", "concurrency_limit": None, "api_visibility": "undocumented"}
# An event that shows no progress keeps its outputs off Gradio's loading-status list (`show_progress_on=[]`):
# the page's frontend updates every component ever on that list, copying its props, on each status message
# of every event (`update_loading_stati_state`), so the list's length is paid on every Step and Play update.
# `show_progress="hidden"` alone changes only what is drawn (bench/page.py measures the renderer's work).
NO_LOADING_STATUS = {"show_progress": "hidden", "show_progress_on": []}


@dataclass
class PanelState:
    """What a panel keeps for one browser session; `nbytes()` is the memory it holds beyond the model: by
    default every array its fields hold (`arrays_nbytes`); a state holding caches counts them itself."""

    def nbytes(self) -> int:
        return arrays_nbytes(self)


def arrays_nbytes(value: Any, depth: int = 0) -> int:
    """Bytes of the numpy arrays and tensors inside `value` (dataclasses, lists, tuples and dicts walked;
    everything else, such as text and numbers, counts 0: it is small beside them)."""
    if depth > 8:
        return 0
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int) and not is_dataclass(value):
        return nbytes
    if is_dataclass(value) and not isinstance(value, type):
        return sum(arrays_nbytes(getattr(value, f.name), depth + 1) for f in fields(value))
    if isinstance(value, dict):
        return sum(arrays_nbytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(arrays_nbytes(v, depth + 1) for v in value)
    return 0


@dataclass
class Page:
    """What every panel shares (see the module docstring); component fields are None outside a page."""

    loaded: Any  # inspector.models.loader.LoadedModel: the page's model, shared by every session
    store: Visitors
    sid: Any = None  # gr.State: the browser session's id
    prompt: Any = None
    chat: Any = None
    system: Any = None
    sampling: tuple = (None,) * 5  # temperature, top-k, top-p, min-p, seed (`fields.sampling_params` order)
    max_new: Any = None
    decoding: Any = None  # inspector.ui.decoding_controls.DecodingControls
    layer: Any = None  # the attention view's layer and query-head sliders (inputs of every view event)
    head: Any = None
    panels: dict[str, "Panel"] = field(default_factory=dict)  # key -> panel, as the registry lists them
    handlers: Any = None  # inspector.ui.handlers.Handlers: prefill, step, ... of the page, which views draw into

    @cached_property
    def inventory(self) -> Any:
        """The model's tensor inventory (`inspector.models.inventory.Inventory`: entries, parameters, bytes)."""
        from inspector.models.inventory import build_inventory

        return build_inventory(self.loaded)

    @property
    def dtype_name(self) -> str:
        """The model's dtype as the page names it ("float32", "bfloat16")."""
        return str(self.loaded.dtype).replace("torch.", "")

    @property
    def limits(self) -> AppLimits:
        """The app's caps: the visitor store's, read by every handler when it runs."""
        return self.store.limits

    @limits.setter
    def limits(self, limits: AppLimits) -> None:
        self.store.limits = limits

    @classmethod
    def bare(cls, loaded: Any, store: Visitors) -> "Page":
        """A page without components: handlers take their inputs as arguments (tests, scripts)."""
        return cls(loaded, store)


class Panel:
    """One view or lab (see the module docstring)."""

    key: ClassVar[str]
    title: ClassVar[str]
    tab_id: ClassVar[str]
    status_id: ClassVar[str | None] = None  # element id of the status line (None: this panel has none)
    State: ClassVar[type[PanelState] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A view's panel names its key only: its tab's label and id are the view's (`inspector.viz.registry`)."""
        super().__init_subclass__(**kwargs)
        view = view_registry.VIEWS.get(cls.__dict__.get("key", ""))
        if view is not None and "title" not in cls.__dict__:
            cls.title, cls.tab_id = view.title, view.tab_id

    def __init__(self, page: Page) -> None:
        self.page = page
        self.outputs: dict[str, Any] = {}  # name -> component, in the order registered
        self.tab: Any = None  # its gr.Tab, once `build_app` lays it out

    @classmethod
    def applies(cls, loaded: Any) -> bool:
        """Whether this panel is on the page of `loaded` (a `LoadedModel`): a view's when the registry's view
        applies to its config (`View.applies`), every model's otherwise."""
        view = view_registry.VIEWS.get(getattr(cls, "key", ""))
        return view is None or view.applies(loaded.config)

    # ---- what it shows
    def show(self, name: str, component: Any) -> Any:
        """Register `component` as the output called `name`; returns it."""
        self.outputs[name] = component
        return component

    def status(self, message: str, error: bool = False) -> str:
        """The panel's one-line status (red with data-error="1" for an error)."""
        return status_line_html(message, error, self.status_id)

    def refusal(self, message: str, sid: Any = None) -> dict[str, Any]:
        """What a refused handler returns: the status line says why, every other output stays (`sid`: the
        handler's first argument, the browser session's id by convention)."""
        return {"status": self.status(message, error=True)}

    # ---- its state in a browser session
    def state(self, sid: str | None) -> tuple[Visitor, Any]:
        """This browser session's visitor and this panel's state there (made on first use). Raises
        VisitorCapError when the server has no free session slot."""
        _, visitor = self.page.store.get_or_create(sid)
        if self.key not in visitor.labs:
            visitor.labs[self.key] = self.State()  # type: ignore[misc]
        return visitor, visitor.labs[self.key]

    def kept(self, sid: str | None) -> Any:
        """This browser session's state of the panel, or None when it has none yet (no slot is taken)."""
        visitor = self.page.store.get(sid)
        return visitor.labs.get(self.key) if visitor is not None else None

    def pause(self, sid: str | None) -> None:
        """Pause: whatever this browser session plays stops after its current step (`inspector.ui.play`)."""
        visitor = self.page.store.get(sid)
        if visitor is not None:
            visitor.pause.set()

    # ---- the page
    def layout(self) -> None:
        """Lay out the panel's components (inside its tab)."""
        raise NotImplementedError

    def wire(self) -> None:
        """Bind the panel's events (after every panel is laid out)."""

    def on(self, triggers: Any, handler: Callable[..., Any], inputs: list, outputs: list[str] | None = None,
           **options: Any) -> Any:
        """Bind `handler` to one trigger or a list of them (`bind`): its named outputs reach the components
        registered under those names (`outputs`: the names it may update; all of the panel's by default)."""
        names = list(self.outputs) if outputs is None else outputs
        components = [self.outputs[n] for n in names]
        options.setdefault("api_name", f"{self.key}_{getattr(handler, '__name__', 'event')}")  # never the API's names
        return bind(triggers, named_outputs(handler, {n: self.outputs[n] for n in names}), inputs, components,
                    **options)


def bind(triggers: Any, fn: Callable[..., Any], inputs: list | None, outputs: list, **options: Any) -> Any:
    """Bind `fn` to one trigger (an event listener such as `button.click`, or a `.then` of another event) or
    to a list of them (`gr.on`), with the page's event defaults; returns the event (for `.then`)."""
    import gradio as gr

    options = {**EVENT_DEFAULTS, **options}
    if options["show_progress"] == "hidden":
        options.setdefault("show_progress_on", [])  # no loading status at all (NO_LOADING_STATUS)
    if isinstance(triggers, list):
        return gr.on(triggers, fn, inputs, outputs, **options)
    return triggers(fn, inputs, outputs, **options)


def named_outputs(handler: Callable[..., Any], components: dict[str, Any]) -> Callable[..., Any]:
    """`handler` with its {name: value} results turned into {component: value} for Gradio (a generator stays
    one, so Gradio streams it)."""
    import gradio as gr

    def convert(out: dict[str, Any]) -> dict[Any, Any]:
        if not out:  # nothing changes: skip every output (an empty dict would reach a lone output as its value)
            return {c: gr.skip() for c in components.values()}
        return {components[k]: v for k, v in out.items()}

    if inspect.isgeneratorfunction(handler):
        @wraps(handler)
        def stream(*args: Any) -> Iterator[dict[Any, Any]]:
            for out in handler(*args):
                yield convert(out)
        return stream

    @wraps(handler)
    def call(*args: Any) -> dict[Any, Any]:
        return convert(handler(*args))
    return call


@dataclass(frozen=True)
class Slot:
    """Where a view shows one of its outputs: the bundle's key, the slot's element id, a plot or HTML. A plot, and
    an HTML view marked `heavy` (a heatmap image, the logit lens table), is drawn only while in sight: out of sight
    (below the fold, in a tab not shown) it is drawn with its latest value when it comes into sight
    (`inspector.ui.bundle`). Light HTML (a line of facts, a small table) is always drawn at once."""

    key: str
    elem_id: str
    plot: bool = False
    heavy: bool = False


class ViewPanel(Panel):
    """A view of the page's run. Its slots are filled through the page's view bundle (`inspector.ui.bundle`):
    `draw(visitor, layer, head)` gives {slot key: value} from the browser session's run while its tab is open
    (on the decode thread: it may ask the session for on-demand tensors), `blank()` their empty values.
    Events that change the run (Prefill, Step, ...) call `draw` of the open view only."""

    slots: ClassVar[tuple[Slot, ...]] = ()
    caption: ClassVar[str] = ""
    wants_lens: ClassVar[bool] = False  # it shows the whole logit lens: the forward run ahead computes it too
    wants_overview: ClassVar[bool] = False  # it shows every head's attention row: computed by the forward run ahead

    def refusal(self, message: str, sid: Any = None) -> dict[str, Any]:
        """A view's refusal goes to the page's status line (with the run's phase); the views stay."""
        return self.page.handlers.render.error_views(self.page.store.get(sid), message)

    def slot(self, key: str) -> Any:
        """The `ViewSlot` component of slot `key` (lay it out where it is called)."""
        from inspector.ui.bundle import ViewSlot

        s = next(s for s in self.slots if s.key == key)
        return ViewSlot(s.key, s.elem_id, plot=s.plot, lazy=s.plot or s.heavy)

    def caption_md(self, text: str | None = None) -> Any:
        import gradio as gr

        return gr.Markdown(self.caption if text is None else text, elem_classes="ii-caption")

    def blank(self) -> dict[str, Any]:
        """Every slot's value before a run (after Reset, at page load)."""
        return {s.key: "" for s in self.slots}

    def draw(self, visitor: Visitor, layer: Any, head: Any) -> dict[str, Any]:
        """Every slot's value for the newest state of the visitor's run."""
        raise NotImplementedError
