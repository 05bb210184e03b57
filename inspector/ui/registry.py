"""The page's views and labs, in tab order: one line each, the panel class that draws it.

A view draws the page's run (Prefill, Step, Play) in the Views group; a lab runs its own experiment on the
page's model in the Labs group. Adding one is a module with its `Panel` subclass (`inspector.ui.panel`) and
a line here. A page holds the panels that apply to its model (`Panel.applies`: Routing, a mixture of
experts' only).
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
from inspector.ui.views.timing import TimingView

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


def build_panels(page: Page) -> dict[str, Panel]:
    """One instance of every panel that applies to the page's model over `page`, by key (kept in `page.panels`)."""
    page.panels = {cls.key: cls(page) for cls in VIEWS + LABS if cls.applies(page.loaded)}
    return page.panels
