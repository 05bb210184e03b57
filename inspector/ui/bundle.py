"""Every view update of an event travels as ONE Gradio output, applied in the browser to the view slots.

The views (status line, token chips, text, each tab's plots and HTML) are `ViewSlot`s: components whose
HTML template is one empty element that Gradio never updates. Events output a single `ViewBundle`; its
value is a JSON object {view key: new value} holding only the views that changed. The bundle's script puts
each value into its slot: `Plotly.react` on a plot slot's kept div, `innerHTML` for an HTML slot. A slot
mounted later (the first time its tab opens) draws the last value the page received for it. A `lazy` slot (a
plot, a heavy HTML view: `inspector.ui.panel.Slot`) out of sight (below the fold, or in a tab not shown) is drawn
when it comes into sight, with its latest value.

Answers may arrive out of order (a queued event answered after a later unqueued Step, a tab's draw answered
after a chip click drew that tab with the new selection), so each update names the state version it was
drawn from (in its status line) and the page keeps, per view, the version of the value it shows: a view's
new value is applied unless a later state's value already replaced it. The other views of that update are
applied (a tab's draw that no later update redrew still shows).

Why: Gradio's cost per update grows with the number of outputs, even skipped ones (click to paint, two
updates to 17 outputs took 106 ms; the same to one output 67 ms).

Plots are redrawn in place (`Plotly.react` on the same div), never rebuilt: Gradio 6's `gr.Plot` re-mounts
its figure on every value (`newPlot` into an empty div, then `Plots.resize`; a 270x120 heatmap paints in
147 ms that way against 89 ms redrawn in place). plotly.js is the copy inside the
installed `plotly` package (the version its figure JSON is written for), served by Gradio as a static
file and loaded by the bundle's script (tried again if a load fails): the page makes no external request.

Handlers return {view key: value} with only the views they changed (a refusal: the status line alone);
`bundled()` adapts them for the wiring.

What travels beside the bundle (big hover values as files, a long prompt's chips sent once) is
`inspector.ui.bundle_parts`'s.
"""

from __future__ import annotations

import html
import inspect
import json
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from typing import Any

import gradio as gr
import plotly
import plotly.graph_objects as go

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"

PLOT_CONFIG = {"displaylogo": False, "displayModeBar": "hover", "responsive": False}

# The bundle's script (`element`, `props`, `watch` are given by gr.HTML). `window.iiViews` keeps the latest
# value per key, so a slot mounted later can draw itself (`window.iiShowView`).
APPLY_JS = """
const views = window.iiViews = window.iiViews || {};
const config = %s;
// plotly.js is loaded here rather than by the components' `head`: when a head script fails to load, Gradio runs
// none of that component's script, and then no view (not even the status line) would ever be drawn. Here a
// failed load is tried again (0.5 s, 1 s, 2 s ... at most 8 s apart), HTML views never wait for it, and a plot
// slot says that its library is still loading until it can be drawn.
const PLOTLY_WAIT = 'The plotting library (plotly.js) did not load; trying again.';
const whenPlotly = window.iiPlotly = window.iiPlotly || new Promise((resolve) => {
  const load = (attempt) => {
    if (window.Plotly) return resolve(window.Plotly);
    const script = document.createElement('script');
    script.src = %s;
    script.onload = () => resolve(window.Plotly);
    script.onerror = () => {
      script.remove();
      window.iiPlotlyFailed = attempt + 1;
      document.querySelectorAll('.ii-slot.ii-plot[data-plotly-wait]').forEach((slot) => {
        slot.textContent = PLOTLY_WAIT;
      });
      setTimeout(() => load(attempt + 1), Math.min(8000, 500 * 2 ** attempt));
    };
    document.head.appendChild(script);
  };
  load(0);
});
// A list slot (`data-items`: the text each item's HTML starts with) changes only the items whose HTML changed:
// its value is one container element holding a head and the items; the items' HTML, as last put in, is kept
// on the slot (`_items`), so a long list (the token chips) costs a step what changed, not its whole length.
const showItems = (slot, html, marker) => {
  // parts: [the container's opening tag and the head, item 1, item 2, ...], without the container's end tag
  const close = html.lastIndexOf('</');
  const parts = close > 0 ? html.slice(0, close).split(marker) : [];
  const end = html.slice(close), old = slot._items, box = slot.firstElementChild;
  const opening = (part) => part.slice(0, part.indexOf('>') + 1);
  slot._items = parts.length >= 2 ? Object.assign(parts, {end}) : null;
  let changed = 0;
  for (let i = 1; i < Math.min(parts.length, old ? old.length : 0); i++) changed += parts[i] !== old[i];
  if (!slot._items || !old || !box || end !== old.end || opening(parts[0]) !== opening(old[0])
      || box.children.length !== old.length  // not the same container, or not one head element + the items
      || changed * 4 > parts.length) {  // most items changed (another branch): one parse of the whole is quicker
    slot.innerHTML = html;
    return;
  }
  if (parts[0] !== old[0]) box.firstElementChild.outerHTML = parts[0].slice(opening(parts[0]).length);
  const kids = box.children;  // kids[i] is item i (kids[0] the head)
  for (let i = old.length - 1; i >= parts.length; i--) kids[i].remove();
  const added = [];
  for (let i = 1; i < parts.length; i++) {
    if (i >= old.length) added.push(marker + parts[i]);
    else if (parts[i] !== old[i]) kids[i].outerHTML = marker + parts[i];
  }
  if (added.length) box.insertAdjacentHTML('beforeend', added.join(''));
};
// A figure whose layout sets `meta.title_outside` (a title that changes every Step): its title is shown as text
// above the plot, and plotly gets the layout without it, the top margin and the height less the title's room, so
// that a Step changes the figure's data only (a changed title cost Plotly.react 5-45 ms more per redraw here).
const caption = (slot) => {
  let cap = slot.previousElementSibling;
  if (!cap || !cap.classList.contains('ii-plot-title')) {
    cap = document.createElement('div');
    cap.className = 'ii-plot-title';
    cap.style.cssText = 'font: 14px "Open Sans", verdana, arial, sans-serif; color: #444; white-space: pre-line;'
      + ' padding: 10px 0 0 12px; background: white;';
    slot.before(cap);
  }
  return cap;
};
const plotLayout = (slot, layout) => {
  const cap = slot.previousElementSibling;
  const outside = layout.meta && layout.meta.title_outside;
  if (!outside) {
    if (cap && cap.classList.contains('ii-plot-title')) cap.remove();
    return layout;
  }
  const title = layout.title || {};
  caption(slot).textContent = (title.text || '').split('<br>').join('\\n');
  const margin = layout.margin || {};
  const top = margin.t === undefined ? 40 : margin.t;
  const room = Math.max(0, top - 12);  // the title's room in the figure
  return {...layout, title: {...title, text: ''}, margin: {...margin, t: top - room},
          height: layout.height ? layout.height - room : layout.height};
};
// A lazy slot (`data-lazy`: a plot, a heavy HTML view) out of sight (outside the viewport, or in a tab not shown)
// is not drawn: it is marked `data-stale` and drawn with the latest value when it comes into sight. A Step then
// costs the renderer only the heavy views a visitor can see (a plot below the fold cost a Step 44-52 ms here).
const sight = window.iiSight = window.iiSight || new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const slot = entry.target;
    slot._inSight = entry.isIntersecting;
    if (entry.isIntersecting && slot.dataset.stale && slot.isConnected) window.iiShowView(slot.dataset.view);
  }
});
const show = (key) => {
  const slot = document.querySelector(`.ii-slot[data-view="${key}"]`);
  if (!slot) return;
  const value = views[key];
  if (slot.dataset.lazy !== undefined) {
    if (!slot._watched) {  // its first value is drawn at once; from then on the observer says where it is
      slot._watched = true;
      sight.observe(slot);
    } else if (slot._inSight === false) {
      slot.dataset.stale = '1';
      return;
    }
    delete slot.dataset.stale;
  }
  if (slot.classList.contains('ii-plot')) {
    if (!window.Plotly) {  // drawn (with the latest value) once plotly.js has loaded
      if (!slot.dataset.plotlyWait) {
        slot.dataset.plotlyWait = '1';
        if (window.iiPlotlyFailed) slot.textContent = PLOTLY_WAIT;
        whenPlotly.then(() => show(key));
      }
      return;
    }
    if (slot.dataset.plotlyWait) {
      delete slot.dataset.plotlyWait;
      slot.textContent = '';
    }
    if (value && value.data) window.Plotly.react(slot, value.data, plotLayout(slot, value.layout || {}), config);
    else {
      window.Plotly.purge(slot);
      plotLayout(slot, {});
    }
  } else if (slot.dataset.items && value) {
    showItems(slot, value, slot.dataset.items);
  } else if (slot._shown !== (value || '')) {  // an HTML view whose value did not change is left as it is
    slot.innerHTML = value || '';
    slot._items = null;
  }
  slot._shown = value || '';
};
window.iiShowView = show;
// HTML views change at once; plots are drawn after the next paint, so the new token (status, chips, text)
// is on screen first even when the plots' update arrives in the same task. A draw shows the latest value.
// The hidden `drawn` marker (which step the plots show) changes with the plots it marks.
const pending = new Set();
const drawPlots = () => { const keys = [...pending]; pending.clear(); keys.forEach(show); };
// Answers can arrive out of order (a queued preview answered after an unqueued Step, a tab's draw after a
// chip click that drew the tab again): a view keeps the version of the state its value was drawn from (in the
// update's status line: inspector/ui/render.py) and takes no value drawn from an older state.
const shownAt = window.iiShownAt = window.iiShownAt || {};
const versionOf = (update) => {
  const m = typeof update.status === 'string' ? /data-version="(\\d+)"/.exec(update.status) : null;
  return m ? Number(m[1]) : null;
};
const take = (key, value, version) => {
  if (version !== null) {
    if (version < (shownAt[key] || 0)) return;
    shownAt[key] = version;
  }
  views[key] = value;
  const slot = document.querySelector(`.ii-slot[data-view="${key}"]`);
  if (slot && (slot.classList.contains('ii-plot') || (key === 'drawn' && pending.size))) {
    if (!pending.size) requestAnimationFrame(() => setTimeout(drawPlots, 0));
    pending.add(key);
  } else {
    show(key);
  }
};
// A view sent with a part's marker (`PromptParts`): the part goes back in; until it arrives the view waits.
const parts = window.iiParts = window.iiParts || new Map();  // digest -> part, the latest few
const waiting = window.iiWaiting = window.iiWaiting || new Map();  // digest -> [[key, value, version], ...]
const MARK = '<!--ii-part:';
const withPart = (value) => {
  const at = value.indexOf(MARK), end = value.indexOf('-->', at);
  const part = parts.get(value.slice(at + MARK.length, end));
  return part === undefined ? null : value.slice(0, at) + part + value.slice(end + 3);
};
const keepPart = (digest, part) => {
  parts.delete(digest);
  parts.set(digest, part);
  while (parts.size > 8) parts.delete(parts.keys().next().value);
  const ready = waiting.get(digest) || [];
  waiting.delete(digest);
  ready.forEach(([key, value, version]) => take(key, withPart(value), version));
};
const apply = () => {
  if (!props.value) return;
  const update = JSON.parse(props.value);
  const version = versionOf(update);
  const keys = Object.keys(update);
  for (const key of keys) if (key.startsWith('part:')) keepPart(key.slice(5), update[key]);
  for (const key of keys) {
    if (key.startsWith('part:')) continue;
    const value = update[key];
    if (typeof value === 'string' && value.includes(MARK)) {
      const full = withPart(value);
      if (full === null) {
        const digest = value.slice(value.indexOf(MARK) + MARK.length, value.indexOf('-->', value.indexOf(MARK)));
        waiting.set(digest, [...(waiting.get(digest) || []), [key, value, version]]);
        continue;
      }
      take(key, full, version);
    } else {
      take(key, value, version);
    }
  }
};
watch('value', apply);
apply();
"""

# A plotly div (`plot`) laid out again whenever its width changes (a tab opened, the window resized: plotly does
# not notice by itself); a plot slot's and a `inspector.ui.figure.Figure`'s script end with it.
FOLLOW_WIDTH_JS = """
new ResizeObserver(() => {
  const shown = plot._fullLayout && plot.clientWidth;
  if (shown && plot.clientWidth !== plot._fullLayout.width) window.Plotly.Plots.resize(plot);
}).observe(plot);
"""

# A slot's script: draw what the page already received for it; a plot follows its div's width.
SLOT_JS = """
const slot = element.querySelector('.ii-slot');
if (window.iiShowView) window.iiShowView(slot.dataset.view);
if (slot.classList.contains('ii-plot')) {
  const plot = slot;
  %s
}
""" % FOLLOW_WIDTH_JS


@cache  # once per process: the one static path
def serve_plotly_js() -> str:
    """Let Gradio serve the bundled plotly.min.js; returns its page-relative URL (the bundle's script loads it)."""
    if not PLOTLY_JS.is_file():
        raise FileNotFoundError(f"plotly.js not found at {PLOTLY_JS}: reinstall the plotly package")
    gr.set_static_paths([PLOTLY_JS])
    return f"gradio_api/file={PLOTLY_JS.as_posix()}"


class ViewSlot(gr.HTML):
    """Where one view is shown; filled by the `ViewBundle`, never by Gradio. `plot=True`: a plotly div.
    `items`: the view is a list (one container element: a head element, then items whose HTML each starts
    with `items`), and an update changes only the items whose HTML changed (the bundle's `showItems`). `lazy`: drawn
    only while in sight (a plot, a heavy view), with the latest value when it comes into sight."""

    def __init__(self, key: str, elem_id: str, plot: bool = False, items: str | None = None, lazy: bool = False,
                 **kwargs: Any) -> None:
        classes = "ii-slot ii-plot" if plot else "ii-slot"
        marker = f' data-items="{html.escape(items)}"' if items else ""
        marker += " data-lazy" if lazy else ""
        super().__init__(value=None, html_template=f'<div class="{classes}" data-view="{key}"{marker}></div>',
                         js_on_load=SLOT_JS,
                         apply_default_css=not plot, padding=not plot, elem_id=elem_id,
                         elem_classes="ii-plot-view" if plot else None, **kwargs)


class ViewBundle(gr.HTML):
    """The one output of every view event: {view key: value} as JSON, applied by its script."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(value=None, html_template="", js_on_load=APPLY_JS % (json.dumps(PLOT_CONFIG),
                                                                               json.dumps(serve_plotly_js())),
                         elem_id="view-bundle", padding=False, container=False, **kwargs)

    def postprocess(self, value: dict | str | None) -> str | None:
        """{key: figure | HTML string} -> one JSON object; figures go as plotly JSON (numpy as base64)."""
        if value is None or isinstance(value, str):
            return value
        return encode(value)


def encode(views: dict[str, Any]) -> str:
    """The bundle's JSON text; each figure is serialized once by plotly (no dict round trip)."""
    parts = []
    for key, value in views.items():
        if isinstance(value, go.Figure):
            text = value.to_json(validate=False)
        elif isinstance(value, dict):  # a figure as a plain dict
            text = go.Figure(value, _validate=False).to_json(validate=False)
        else:
            text = json.dumps(value)
        parts.append(f"{json.dumps(key)}:{text}")
    return "{" + ",".join(parts) + "}"


def is_skip(value: Any) -> bool:
    """True for `gr.skip()` (a view left as it is)."""
    return isinstance(value, dict) and value == gr.skip()


def pack(views: dict[str, Any]) -> dict | Any:
    """{key: value} without skipped values; `gr.skip()` when nothing changed (the bundle is not sent)."""
    changed = {k: v for k, v in views.items() if not is_skip(v)}
    return changed if changed else gr.skip()


def bundled(fn: Callable, lead: int = 0) -> Callable:
    """Wrap a handler that returns {view key: value} (after `lead` ordinary outputs, as a tuple) into one whose
    outputs are those `lead` outputs and the bundle (a generator stays a generator: Gradio streams it)."""
    def convert(out: Any) -> Any:
        if not lead:
            return pack(out)
        return [*out[:lead], pack(out[lead])]

    if inspect.isgeneratorfunction(fn):
        @wraps(fn)
        def stream(*args: Any) -> Any:
            for out in fn(*args):
                yield convert(out)
        return stream

    @wraps(fn)
    def call(*args: Any) -> Any:
        return convert(fn(*args))
    return call
