"""Shared look for every view: colors a newcomer can read, a compact plotly layout, token display.

Pure helpers: no torch, no gradio. Builders in this package take records / numpy / plain Python and
return plotly figures or HTML strings.
"""

from __future__ import annotations

import html
import textwrap
from functools import lru_cache

import plotly.graph_objects as go
from plotly.colors import make_colorscale, sequential

PROMPT = "#3b82f6"  # blue: prompt tokens / prefill
GENERATED = "#10b981"  # green: generated tokens / decode
SPECIAL = "#a855f7"  # purple: special (control) tokens
CHOSEN = "#f97316"  # orange: the chosen / selected thing
REMOVED = "#d1d5db"  # grey: filtered out
ATTN = "#6366f1"  # indigo: attention contribution
MLP = "#eab308"  # amber: MLP contribution
KV_K = "#0ea5e9"
KV_V = "#14b8a6"
# Explicit colorscales: with validation off a name like "Blues" would reach plotly.js, whose "Blues"
# runs the other way round (dark = low).
BLUES = make_colorscale(sequential.Blues)

MAX_TICKS = 24  # position axes show at most this many labels (each costs plotly ~0.5-1 ms per redraw)


@lru_cache(maxsize=1 << 16)  # a view labels every position on each Step (2 x 2,842 calls at long context)
def show_piece(piece: str, limit: int = 16) -> str:
    """Make whitespace visible (␣ for space, ↵ for newline, ⇥ for tab) and cut long pieces."""
    out = piece.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    if not out:
        out = "∅"
    return out if len(out) <= limit else out[: limit - 1] + "…"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def status_line_html(message: str, error: bool = False, elem_id: str | None = None) -> str:
    """A lab tab's one-line status: the message, red with data-error="1" when it is an error."""
    ident = f'id="{elem_id}" ' if elem_id else ""
    return f'<div {ident}class="{"ii-error" if error else "ii-ok"}" data-error="{int(error)}">{esc(message)}</div>'


# automargin: room for long (rotated) tick labels and the axis title (plotly.py's default template sets it).
# ticklabeloverflow "allow": plotly.js's default on numeric axes ("hide past div") measures every tick
# label's box after drawing it, each a forced page layout: in a Chrome profile of a Step on the Attention
# tab that was ~75 of the ~170 ms its two plots took to draw. automargin already keeps labels inside.
GRID = {"gridcolor": "#eef0f3", "zerolinecolor": "#d1d5db", "automargin": True, "ticklabeloverflow": "allow"}


# Characters per title line: plotly.js never wraps a title and the SVG cuts it at the figure's edge; at 14 px
# about 42 characters fit the narrowest plot (a 390 px phone), so longer titles wrap onto more lines.
TITLE_LINE = 42
TITLE_LINE_PX = 18  # the height one more title line takes from the plot (top margin)
# `meta=TITLE_OUTSIDE` in a figure's layout: the page shows its title as text above the plot, not inside plotly,
# for a figure whose title changes every Step (inspector/ui/bundle.py: then a Step changes the figure's data only)
TITLE_OUTSIDE = {"title_outside": True}


def wrap_title(title: str, width: int = TITLE_LINE) -> str:
    """The title with <br> between lines of at most `width` characters (its own <br>s kept)."""
    return "<br>".join(line for part in title.split("<br>")
                       for line in (textwrap.wrap(part, width, break_on_hyphens=False) or [part]))


def figure(traces: list[dict], title: str, height: int = 320, *, xaxis: dict | None = None,
           yaxis: dict | None = None, **layout: object) -> go.Figure:
    """A figure built in one go from plain dicts (plotly.js names: nested dicts, no magic underscores).

    No plotly validation and no `update_*`/`add_*` calls: those walk plotly's property tree and cost
    3-15 ms each, while every decode step redraws a view; built this way a figure costs about 1 ms.
    The compact common look (title readable as the figure's SVG title, white background, light grid)
    comes from here; `layout` adds or overrides top-level keys (shapes, annotations, barmode, ...).
    A long title wraps (`wrap_title`) and the top margin grows with it; a legend is shown whenever more
    than one series is drawn (plotly.js would hide it for one trace with several colors)."""
    title = wrap_title(title)
    extra = TITLE_LINE_PX * title.count("<br>")
    if (layout.get("legend") or {}).get("y", 0) > 1:  # type: ignore[union-attr]
        extra += 22  # a legend above the plot sits under the title, not on it
    margin = {"l": 60, "r": 20, "t": 40, "b": 50, **layout.pop("margin", {})}  # type: ignore[dict-item]
    margin["t"] += extra
    series = sum(1 for t in traces if t.get("showlegend") is not False)
    full = {
        # the title hangs from the top edge, so its extra lines go into the grown margin, above the plot
        "title": {"text": title, "x": 0.01, "xanchor": "left", "y": 1, "yanchor": "top", "yref": "container",
                  "pad": {"t": 10}, "font": {"size": 14}},
        # an explicit empty template: otherwise plotly.py embeds its default one (6.5 KB of JSON) in every
        # figure, which plotly.js merges on each redraw (measured ~16 ms per figure); plotly.js's own
        # defaults are already white with light grids.
        "template": {},
        "colorway": [PROMPT, GENERATED, CHOSEN, ATTN, MLP, SPECIAL],
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {**GRID, **(xaxis or {})},
        "yaxis": {**GRID, **(yaxis or {})},
        "height": height + extra,
        "margin": margin,
        "showlegend": series > 1,
        "font": {"size": 11},
        "hoverlabel": {"font": {"size": 12}},
        **layout,
    }
    return go.Figure(data=traces, layout=full, _validate=False)


def vline(x: float, color: str, width: float = 2, dash: str = "solid") -> dict:
    """A vertical line shape across the whole plot height at data coordinate x."""
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": color, "width": width, "dash": dash}}


def position_ticks(labels: list[str], start: int = 0, whole_strides: bool = False) -> dict:
    """Tick values/texts for a position axis: every position when few, evenly thinned when many.

    With `whole_strides`, the axis range is also set: from half a position before the first to half a position
    before the next multiple of the stride, so less than one stride of it lies past the last position. An axis
    that grows by one position a Step then keeps its range, and its tick labels their places, for up to
    `stride` Steps: plotly measures a rotated tick label again (a forced layout each) whenever it moves, and
    takes one that stays in place from its cache."""
    n = len(labels)
    stride = max(1, -(-n // MAX_TICKS))
    vals = list(range(start, start + n, stride))
    ticks = {"tickmode": "array", "tickvals": vals, "ticktext": [labels[v - start] for v in vals]}
    if whole_strides:
        ticks["range"] = [start - 0.5, start + -(-n // stride) * stride - 0.5]
    return ticks


def empty_figure(message: str, height: int = 200) -> go.Figure:
    """A blank figure carrying a hint, shown before anything has run."""
    hint = {"text": message, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "showarrow": False,
            "font": {"size": 14, "color": "#6b7280"}}
    return figure([], "", height, xaxis={"visible": False}, yaxis={"visible": False}, annotations=[hint])
