"""`figure(result)`: an analysis result (`Model.attribute`, `patch`, `loss(grad_norms=True)`, `quant`,
`beam_search`, `head_scores`, `head_ablation`) drawn by the builder its lab tab or view on the page uses
(`inspector.viz`: the head atlas's map and its ablation bars are the Attention view's). Importing this module
imports plotly; `inspector.figure` imports it only when called.
"""

from __future__ import annotations

from typing import Any, Callable

import plotly.graph_objects as go

from inspector.analysis.findings import Attribution, PatchSweep, TokenLosses, TrainingStep
from inspector.analysis.head_findings import HeadAblation, HeadAtlas
from inspector.errors import InputError
from inspector.generation.beam_tree import BeamRecord
from inspector.quant.measurements import FidelityRecord
from inspector.viz import beams as vb
from inspector.viz import heads as vh
from inspector.viz import interventions as vi
from inspector.viz import quant as vq
from inspector.viz import training as vt

# result type -> the lab's builder
BUILDERS: dict[type, Callable[[Any], go.Figure]] = {
    Attribution: vi.dla_figure,
    PatchSweep: vi.patch_figure,
    TrainingStep: vt.layer_norms_figure,
    FidelityRecord: vq.strip_figure,
    BeamRecord: vb.beam_tree,
    HeadAtlas: vh.atlas_figure,
    HeadAblation: vh.ablation_figure,
}


def figure(result: Any) -> go.Figure:
    """The lab figure of an analysis result; InputError for anything else (a run draws with `run.figure`)."""
    build = BUILDERS.get(type(result))
    if build is None:
        hint = " (a TokenLosses has none: loss(text, grad_norms=True) gives the Training tab's)" \
            if isinstance(result, TokenLosses) else ""
        kinds = ", ".join(t.__name__ for t in BUILDERS)
        raise InputError(f"no figure for a {type(result).__name__}{hint}: figure() draws {kinds}")
    return build(result)
