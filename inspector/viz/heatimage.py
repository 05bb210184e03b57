"""A heatmap drawn as ONE image (a PNG, one pixel per cell) with HTML axes, for views redrawn every step.

plotly.js took 50-75 ms of the page's time to redraw a heatmap of a few thousand cells on each decode step
(its axes, tick labels and margins, measured with Plotly.react hooked in the page); the PNG is built here
in a few ms (Pillow, a palette image: one byte per cell) and the browser shows it in a few. Hover stays: the
page's script (static/app.js) names the cell under the mouse from the element's data: `data-z` (cell values,
float32 little-endian, base64, rows × cols), `data-rows` / `data-cols` (a name per row / column, JSON),
`data-what` (what a value is) and `data-digits`. A big heatmap's values and names then travel as files
(inspector/ui/bundle_parts.py `HoverFiles`), which finds the names right after `data-z`, single-quoted.

Pure: numpy in, an HTML string out.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field

import numpy as np
from PIL import Image
from plotly.colors import convert_colors_to_same_type, unlabel_rgb

from inspector.viz.common import esc


def colormap(colors: list[str]) -> np.ndarray:
    """(256, 3) uint8 lookup table: plotly color stops (low first; 'rgb(...)' or hex) sampled at every code."""
    stops = np.array([unlabel_rgb(c) for c in convert_colors_to_same_type(colors, colortype="rgb")[0]], np.float32)
    at = np.linspace(0, len(stops) - 1, 256)
    return np.stack([np.interp(at, np.arange(len(stops)), stops[:, c]) for c in range(3)], 1).round().astype(np.uint8)


def png(codes: np.ndarray, lut: np.ndarray) -> bytes:
    """(rows, cols) uint8 codes -> PNG bytes, one pixel per cell colored by `lut` (256, 3): a palette image
    (the codes as its indices, `lut` as its palette), which decodes to the same colors as `lut[codes]` in RGB
    with a third of the bytes to compress (270 x 2,841 cells: 1.7 ms and 22 KB, against 20-38 ms and 45 KB)."""
    image = Image.frombytes("P", (codes.shape[1], codes.shape[0]), np.ascontiguousarray(codes, np.uint8).tobytes())
    image.putpalette(lut.tobytes())  # (256, 3) uint8 -> 768 bytes, R G B per code
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


@dataclass
class HeatImage:
    """Everything one image heatmap shows. `codes` are the colors (uint8, 0 = the colormap's low end);
    `values` are what hover reports (the codes themselves when None)."""

    elem_id: str
    title: str
    codes: np.ndarray  # (rows, cols) uint8
    lut: np.ndarray  # (256, 3) uint8
    row_names: list[str]  # per row, for hover
    col_names: list[str]  # per column, for hover
    y_ticks: list[tuple[int, str]]  # (row, label) shown left of the image, row 0 on top
    x_ticks: list[tuple[int, str]]  # (col, label) shown under the image, rotated
    scale: tuple[str, str, str]  # colorbar: top label, bottom label, title
    what: str = "value"
    digits: int = 0
    values: np.ndarray | None = None  # (rows, cols) float
    height: int = 300
    row_band: int | None = None  # a thin line every `row_band` rows (layer blocks)
    marks: list[str] = field(default_factory=list)  # extra HTML inside the image box (see row_mark/col_mark)
    x_title: str = ""
    y_title: str = ""


def row_mark(row: int, n_rows: int) -> str:
    """An outline around one row (the selected head)."""
    pct = 100.0 / max(1, n_rows)
    return f'<div class="ii-hm-row" style="top:{row * pct:.3f}%;height:{pct:.3f}%"></div>'


def col_mark(col: int, n_cols: int) -> str:
    """A vertical line through the middle of one column (the selected position)."""
    return f'<div class="ii-hm-col" style="left:{(col + 0.5) * 100.0 / max(1, n_cols):.3f}%"></div>'


def heat_html(h: HeatImage) -> str:
    n_rows, n_cols = h.codes.shape
    values = (h.codes if h.values is None else h.values).astype("<f4")
    image = base64.b64encode(png(h.codes, h.lut)).decode()
    ys = "".join(f'<span style="top:{(r + 0.5) * 100.0 / n_rows:.3f}%">{esc(t)}</span>' for r, t in h.y_ticks)
    xs = "".join(f'<span style="left:{(c + 0.5) * 100.0 / n_cols:.3f}%">{esc(t)}</span>' for c, t in h.x_ticks)
    band = (f'<div class="ii-hm-bands" style="background-size:100% {h.row_band * 100.0 / n_rows:.4f}%"></div>'
            if h.row_band else "")
    top, bottom, scale_title = h.scale
    return (
        f'<div id="{h.elem_id}" class="ii-heat" data-what="{esc(h.what)}" data-digits="{h.digits}" '
        f'data-z="{base64.b64encode(values.tobytes()).decode()}" '
        f"data-rows='{esc(json.dumps(h.row_names))}' data-cols='{esc(json.dumps(h.col_names))}'>"
        f'<div class="ii-hm-title">{esc(h.title)}</div>'
        f'<div class="ii-hm-body"><div class="ii-hm-ytitle">{esc(h.y_title)}</div><div class="ii-hm-yticks">{ys}</div>'
        f'<div class="ii-hm-map" style="height:{h.height}px">'
        f'<img src="data:image/png;base64,{image}" alt="{esc(h.title)}" draggable="false">'
        f'{band}{"".join(h.marks)}<div class="ii-hm-tip" hidden></div></div>'
        f'<div class="ii-hm-scale"><span>{esc(top)}</span><div class="ii-hm-bar" style="background:'
        f'linear-gradient(to top, {", ".join(f"rgb({r},{g},{b})" for r, g, b in h.lut[::51])})"></div>'
        f'<span>{esc(bottom)}</span><small>{esc(scale_title)}</small></div></div>'
        f'<div class="ii-hm-xticks">{xs}</div><div class="ii-hm-xtitle">{esc(h.x_title)}</div></div>'
    )
