"""The page's views and labs, in tab order: the panel class that draws each.

A view draws the page's run (Prefill, Step, Play) in the Views group: the views are the registry of views'
tabs, in its order (`inspector.viz.registry`: a view's name, tab and draw functions, which the API and the
tour read too). A view with a panel of its own lists its `ViewPanel` subclass in `PANELS` (keyed by the
view's key); any other registered view gets the panel that shows its figure and HTML (`drawn_view`). A lab
runs its own experiment on the page's model in the Labs group: a module with its `Panel` subclass
(`inspector.ui.panel`) and a line in `LABS`. A page holds the panels that apply to its model
(`Panel.applies`: Routing, a mixture of experts' only).
"""

from __future__ import annotations

from inspector.ui.labs.interventions import InterventionsLab
from inspector.ui.labs.kv_policies import KVPoliciesLab
from inspector.ui.labs.models import ModelsLab
from inspector.ui.labs.quantization import QuantizationLab
from inspector.ui.labs.serving import ServingLab
from inspector.ui.labs.speculative import SpeculativeLab
from inspector.ui.labs.training import TrainingLab
from inspector.ui.panel import Page, Panel
from inspector.ui.views.attention import AttentionView
from inspector.ui.views.beams import BeamsView
from inspector.ui.views.inventory import InventoryView
from inspector.ui.views.kv_cache import KVCacheView
from inspector.ui.views.residual import ResidualView
from inspector.ui.views.routing import RoutingView
from inspector.ui.views.sampling import SamplingView
from inspector.ui.views.drawn import drawn_view
from inspector.ui.views.timing import TimingView
from inspector.viz import registry as view_registry

# the views whose panel is their own (each keyed by its view's key in the registry of views)
VIEWS: tuple[type[Panel], ...] = (
    ResidualView,
    AttentionView,
    RoutingView,
    KVCacheView,
    SamplingView,
    InventoryView,
    TimingView,
    BeamsView,
)
LABS: tuple[type[Panel], ...] = (
    SpeculativeLab,
    ServingLab,
    QuantizationLab,
    KVPoliciesLab,
    InterventionsLab,
    ModelsLab,
    TrainingLab,
)


def page_views() -> tuple[type[Panel], ...]:
    """The Views group's panels: every tab of the registry of views in its order, each its own panel (`VIEWS`)
    or one that shows its figure and HTML; then a panel of `VIEWS` the registry does not list."""
    own = {cls.key: cls for cls in VIEWS}
    listed = tuple(own.pop(v.key, None) or drawn_view(v) for v in view_registry.tabs())
    return listed + tuple(own.values())


def build_panels(page: Page) -> dict[str, Panel]:
    """One instance of every panel that applies to the page's model over `page`, by key (kept in `page.panels`)."""
    page.panels = {cls.key: cls(page) for cls in page_views() + LABS if cls.applies(page.loaded)}
    return page.panels
