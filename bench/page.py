"""How heavy the page is in the browser, beside a minimal Gradio page served in the same run: prints a table,
each target of issue 45 beside the figure measured now (Playwright + Debian chromium at 1400 x 900, the real
default model, the app served in this process as the browser tests serve it: `harness.app_server`).

- Load: a fresh browser context (empty cache) navigates to the app until its status line shows, and to a
  minimal Gradio Blocks page (one textbox, one button, one plotly plot, served by this process too) until
  its plot is drawn; alternated, `--loads` times each, medians. Target: ≤ 1.5× the minimal page.
- DOM nodes at the first screen (after the page-load chain ends, `body[data-inspector-loaded]`, garbage
  collected first): CDP `Performance.getMetrics` "Nodes" (every DOM node, text nodes too) and the elements;
  the JS heap beside them. Target ≤ 8,000 nodes.
- Opening the Attention tab for the first time on a page, after a short prefill and (in the long-context part)
  after the long prefill: click → the prompt's attention pattern painted, the renderer's task ms meanwhile and
  (long context) the bundle's size. No target; a tab's first opening is what a visitor waits for.
- Renderer main-thread work per Step at short context: CDP `Performance.getMetrics` TaskDuration,
  ScriptDuration, LayoutDuration (+ RecalcStyleDuration) deltas over `--steps` Steps on each view tab (each
  Step waits until the tab's views are painted, then 300 ms), divided by the Steps. Target ≤ 60 ms of tasks
  per Step (the Residual tab, the first one a visitor sees, is the target's row; the other tabs are shown).
  Beside them, from a Chromium trace of the same Steps (`main_thread_tasks`): the main thread's top-level tasks'
  wall time and their thread (CPU) time. Task durations are wall time: on a loaded machine (2 cores shared with
  the server's forwards and whatever else runs) they include the time the renderer waited for a core inside a
  task, which the CPU time does not; the minimal page's click is measured the same way, and so is Gradio's floor:
  a page whose one button updates one gr.HTML line (`floor_page`), the least a Gradio event costs the renderer.
  The peers' clicks start once their page's loading spinner has stopped (`per_click`).
- Play at max on every view tab, two protocols in one run, so they can be told apart:
  bench.ui's (Play until `--play-tokens` tokens reached the page, counted from the click, against the engine
  alone in this process, `new_ui_session`, at its best thread count, mean of just before and just after) and
  the findings' (the tokens that reached the page in `--play-s` seconds of Play, counted from the first token
  update, against `inspector run` in its own process on the same prompt, measured before and after the
  series, its own "tok/s over the decode steps"). Target ≥ 0.85× the engine alone, on every tab, both ways.
  Beside them, where the time goes in the findings' window: the model's step (forward + sample) as the app's
  records time it during Play against the engine alone on the app's decode thread, and the cores in use (CPU
  seconds per second: `bench.ui.cpu_s`) by the app's decode thread, by the whole process and by the browser.
  Then, with no browser page open, the app's own Play handler driven in this process on each tab
  (`play_without_browser`), with the decode thread at the app's thread count and at every torch thread, against
  the engine alone at each: what Play itself costs beside the model's steps, apart from the browser's share.
  Last, Play's ceiling with the browser on the same cores: the engine alone at each thread count, with no Play,
  while another process takes the browser's measured share of a core during Play (the median over the tabs) in
  20 ms bursts (`engine_beside_load`), against both peers. Play's own work between steps only lowers it, so a
  ceiling under the target says that no work taken off the page brings Play to it on this machine, as far as
  the synthetic load stands for the browser (its real threads wake more often, and they stall a 2-thread decode
  more than their share).
- A Step at long context: a plain prompt of `--long-tokens` tokens (the app built with
  INSPECTOR_MAX_PROMPT_TOKENS=4096), on the Residual and the Attention tab: click to the new token painted
  (status, chips, text), click to the views painted, against the app's TPOT (forward + sample of the same
  steps, from the session's records); the server's handler / encode time and the bundle's size
  (`bench.ui.ServerTimes`) and the renderer's task ms per Step show where the rest goes.
  Target: click to the views painted ≤ TPOT + 120 ms.

Usage: python -m bench.page [--loads 3] [--steps 10] [--play-tokens 64] [--play-s 6] [--long-tokens 2840]
                            [--skip play,long]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from bench.ui import CHROMIUM_ARGS, CLICK_TO_PAINT, PLAY_TABS, ServerTimes, chromium, cpu_s, open_tab  # noqa: E402
from harness.app_server import TOUR_SEEN_JS, launch_here  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1400, "height": 900}
APP_READY = "body[data-inspector-loaded]"  # the page-load chain has ended (inspector/ui/app.py PAGE_READY_JS)
STEP_TABS = ("Residual stream", "Attention", "KV cache", "Sampling", "Tensor inventory", "Timing", "Beams")
STORY = "Write a long story about a dragon who learns to bake bread."
METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")
__all__ = ["CHROMIUM_ARGS", "main"]


def minimal_page():
    """The peer: a Gradio Blocks page with one textbox, one button and one plotly plot, launched here."""
    import gradio as gr
    import plotly.graph_objects as go

    with gr.Blocks(title="minimal") as demo:
        box = gr.Textbox(label="Prompt", elem_id="mini-box")
        button = gr.Button("Go", elem_id="mini-btn")
        plot = gr.Plot(go.Figure(go.Scatter(y=[1, 3, 2])), elem_id="mini-plot")
        button.click(lambda text: go.Figure(go.Scatter(y=[len(text), 1, 2])), [box], [plot])
    return launch_here(demo)


def floor_page():
    """Gradio's own floor: a Blocks page whose one button updates one gr.HTML with a line of text (no plot, no
    input read), launched here. What any Gradio event that changes one output costs the renderer."""
    import gradio as gr

    with gr.Blocks(title="floor") as demo:
        clicks = gr.State(0)
        button = gr.Button("Go", elem_id="floor-btn")
        line = gr.HTML("<p>0</p>", elem_id="floor-html")
        button.click(lambda n: (n + 1, f'<p data-n="{n + 1}">{n + 1}</p>'), [clicks], [clicks, line])
    return launch_here(demo)


def metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def load_once(browser, url: str, ready: str) -> float:
    """Seconds from navigation (a fresh context: nothing cached) to `ready` visible."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(TOUR_SEEN_JS)
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(url)
    page.locator(ready).first.wait_for(state="visible", timeout=120_000)
    elapsed = time.perf_counter() - t0
    context.close()
    return elapsed


def opened(browser, url: str, ready: str = APP_READY):
    """(page, CDP session with Performance metrics on) of `url` in a new page, once `ready` is in it."""
    page = browser.new_page(viewport=VIEWPORT)
    page.add_init_script(TOUR_SEEN_JS)
    page.goto(url)
    page.locator(ready).first.wait_for(state="attached", timeout=120_000)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    return page, cdp


def first_screen(browser, url: str, ready: str) -> dict[str, float]:
    """CDP Nodes, elements and JS heap (MB) once the page is ready (garbage collected first)."""
    page, cdp = opened(browser, url, ready)
    page.wait_for_timeout(1000)
    cdp.send("HeapProfiler.collectGarbage")
    m = metrics(cdp)
    elements = page.evaluate("document.getElementsByTagName('*').length")
    page.close()
    return {"nodes": m["Nodes"], "elements": elements, "heap_mb": m["JSHeapUsedSize"] / 2**20}


def prefill(page, prompt: str, chat: bool = True, max_new: int = 200, timeout_ms: int = 120_000) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#max-new-tokens input").fill(str(max_new))
    tick = page.locator("#chat-toggle input").first
    if tick.count() and tick.is_enabled() and tick.is_checked() != chat:
        tick.set_checked(chat)
    page.locator("#prefill-btn").click()
    page.locator("#status-phase", has_text="prefill done").wait_for(timeout=timeout_ms)
    page.wait_for_timeout(500)


def main_thread_tasks(browser, page, during) -> tuple[float, float]:
    """(wall ms, CPU ms) of the renderer main thread's tasks while `during()` runs, from a Chromium trace: each
    top-level task's duration and its thread time. On a loaded machine the first (what CDP TaskDuration
    counts too) includes the time the renderer waited for a core inside its tasks; the second is its own work."""
    import json

    browser.start_tracing(page=page, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"])
    during()
    events = json.loads(browser.stop_tracing())["traceEvents"]
    main = {(e["pid"], e["tid"]) for e in events
            if e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain"}
    tasks = sorted((e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("name") == "RunTask"
                    and e.get("ph") == "X" and "dur" in e), key=lambda e: (e["ts"], -e["dur"]))
    wall = cpu = 0.0
    end = -1
    for e in tasks:
        if e["ts"] >= end:  # a top-level task (a nested one lies inside the last)
            wall, cpu, end = wall + e["dur"] / 1000, cpu + e.get("tdur", e["dur"]) / 1000, e["ts"] + e["dur"]
    return wall, cpu


def steps_on_tab(page, cdp, tab: str, n: int, server: ServerTimes | None = None, settle_ms: int = 800,
                 browser=None) -> dict:
    """`n` Steps on `tab`: renderer metric deltas per Step (ms), click-to-paint medians, server rows; with
    `browser`, also the main thread's task wall and CPU ms per Step from a trace (`main_thread_tasks`). The
    tab's own draw (answered after opening it) is given `settle_ms` first, so that it is not counted as a Step's."""
    open_tab(page, tab)
    page.wait_for_timeout(settle_ms)
    before, clicks, rows = metrics(cdp), [], []

    def steps() -> None:
        for _ in range(n):
            k = len(server.rows) if server else 0
            clicks.append(page.evaluate(CLICK_TO_PAINT, "step-btn"))
            page.wait_for_timeout(300)
            if server and len(server.rows) > k:
                rows.append(server.rows[k])

    traced = main_thread_tasks(browser, page, steps) if browser is not None else None
    if traced is None:
        steps()
    after = metrics(cdp)
    per = {name: (after[name] - before[name]) * 1000 / n for name in METRICS}
    per["trace_wall_ms"], per["cpu_ms"] = (t / n for t in traced) if traced else (float("nan"), float("nan"))
    per["token_ms"] = statistics.median(c[0] for c in clicks)
    per["views_ms"] = statistics.median(c[1] for c in clicks)
    per["rows"] = rows
    return per


def per_click(browser, url: str, ready: str, click, n: int, settle_ms: int = 5000) -> dict[str, float]:
    """A peer page's renderer metric deltas (ms) per click, `n` clicks (`click(page, i)` clicks once and waits
    until the page shows that click's answer), and the main thread's task wall and CPU ms per click
    (`main_thread_tasks`). `ready`: what the page shows once loaded; the clicks start `settle_ms` after it, once
    the spinner of Gradio's loading screen has stopped (it animates for about 4 s after a page shows)."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)
    page.locator(ready).first.wait_for(state="visible", timeout=120_000)
    page.wait_for_timeout(settle_ms)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    before = metrics(cdp)

    def clicks() -> None:
        for i in range(n):
            click(page, i)
            page.wait_for_timeout(300)

    wall, cpu = main_thread_tasks(browser, page, clicks)
    after = metrics(cdp)
    page.close()
    return {**{name: (after[name] - before[name]) * 1000 / n for name in METRICS}, "trace_wall_ms": wall / n,
            "cpu_ms": cpu / n}


def minimal_click(page, i: int) -> None:
    """One click of the minimal page's button, with a new text: until its gr.Plot shows the text's length."""
    page.locator("#mini-box textarea").fill("x" * (i + 5))
    page.locator("#mini-btn").click()
    page.wait_for_function(f"(() => {{ const p = document.querySelector('#mini-plot .js-plotly-plot'); "
                           f"return p && p.data && p.data[0].y[0] === {i + 5}; }})()", timeout=60_000)


def floor_click(page, i: int) -> None:
    """One click of `floor_page`'s button: until its gr.HTML line shows the click's count."""
    page.locator("#floor-btn").click()
    page.locator(f'#floor-html p[data-n="{i + 1}"]').wait_for(state="visible", timeout=60_000)


def cpu_profile(cdp, during) -> list[tuple[float, str]]:
    """The renderer's main-thread CPU profile (CDP Profiler) while `during()` runs: [(self ms, "function
    file:line"), ...], the heaviest first, with the totals per script file appended."""
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    cdp.send("Profiler.start")
    during()
    profile = cdp.send("Profiler.stop")["profile"]
    nodes = {n["id"]: n for n in profile["nodes"]}
    dt = {}
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        dt[sample] = dt.get(sample, 0) + delta / 1000
    by_fn, by_file = {}, {}
    for node_id, ms in dt.items():
        frame = nodes[node_id]["callFrame"]
        url = frame["url"].rsplit("/", 1)[-1][:40] or "(native)"
        name = f"{frame['functionName'] or '(anonymous)'} {url}:{frame['lineNumber'] + 1}:{frame['columnNumber'] + 1}"
        if frame["functionName"] in ("(idle)", "(program)", "(garbage collector)"):
            name = frame["functionName"]
        by_fn[name] = by_fn.get(name, 0) + ms
        by_file[url] = by_file.get(url, 0) + ms
    top = sorted(((ms, n) for n, ms in by_fn.items() if n != "(idle)"), reverse=True)[:20]
    files = sorted(((ms, f"file {f}") for f, ms in by_file.items()), reverse=True)[:8]
    return top + files


def trace_events(browser, page, during) -> list[tuple[float, str]]:
    """A Chromium trace (devtools.timeline) while `during()` runs: the renderer main thread's events, summed
    by name (nested events counted inside their parents too), the heaviest first."""
    import json

    browser.start_tracing(page=page, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"])
    during()
    events = json.loads(browser.stop_tracing())["traceEvents"]
    main = {(e["pid"], e["tid"]) for e in events
            if e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain"}
    by_name = {}
    for e in events:
        if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X" and "dur" in e:
            by_name[e["name"]] = by_name.get(e["name"], 0) + e["dur"] / 1000
    return sorted(((ms, n) for n, ms in by_name.items()), reverse=True)[:25]


def cli_tok_s(prompt: str, tokens: int) -> float:
    """`inspector run` in its own process on the same prompt: its own tok/s over the decode steps."""
    out = subprocess.run([sys.executable, "-m", "inspector.commands.cli", "run", "--prompt", prompt, "--chat",
                          "--max-new-tokens", str(tokens)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    found = re.search(r"([\d.]+) tok/s over the decode steps", out.stdout + out.stderr)
    if not found:
        raise SystemExit(f"inspector run gave no tok/s:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return float(found.group(1))


def play_on_tab(browser, page, tab: str, tokens: int, window_s: float) -> dict:
    """Play at max on `tab` from a fresh prefill of STORY: bench.ui's count (until `tokens` reached the page,
    from the click) and the findings' (tokens reached in `window_s`, from the first token update)."""
    open_tab(page, tab)
    prefill(page, STORY)
    if not page.locator("#play-max input").is_checked():
        page.locator("#play-max input").check()
    start = int(page.locator("#token-count").get_attribute("data-generated"))
    t0 = time.perf_counter()
    page.locator("#play-btn").click()
    page.wait_for_function(f"Number(document.querySelector('#token-count').dataset.generated) > {start}",
                           timeout=120_000, polling=10)
    t_first, cpu_first = time.perf_counter(), cpu_s(browser)
    first = int(page.locator("#token-count").get_attribute("data-generated"))
    page.wait_for_function(
        f"Number(document.querySelector('#token-count').dataset.generated) >= {start + tokens}"
        " || document.querySelector('#status-line').dataset.phase.startsWith('finished')",
        timeout=600_000, polling=10)
    t_tokens = time.perf_counter()
    got_tokens = int(page.locator("#token-count").get_attribute("data-generated")) - start
    left = window_s - (time.perf_counter() - t_first)
    if left > 0:
        page.wait_for_timeout(left * 1000)
    t_window, cpu_window = time.perf_counter(), cpu_s(browser)
    got_window = int(page.locator("#token-count").get_attribute("data-generated")) - first
    page.evaluate("document.getElementById('pause-btn').click()")
    page.wait_for_function("!document.querySelector('#status-line').dataset.phase.includes('playing')",
                           timeout=120_000)
    return {"bench_ui": got_tokens / (t_tokens - t0), "window": got_window / (t_window - t_first),
            "first_ms": (t_first - t0) * 1000, "window_tokens": (first, first + got_window),
            "cores": {name: (b - a) / (t_window - t_first) for name, a, b in
                      zip(("the decode thread", "this process (the decode thread included)", "browser (Chromium)"),
                          cpu_first, cpu_window)}}


# Opens a view tab and returns the ms until its pattern plot holds a heatmap and two frames have painted.
OPEN_PATTERN_TO_PAINT = """async (label) => {
  const ready = () => {
    const slot = document.querySelector('#attn-pattern .ii-slot');
    return slot && slot.data && slot.data.length > 0 && slot.data[0].type === 'heatmap';
  };
  const t0 = performance.now();
  window.inspectorOpenTab(label);
  while (!ready()) await new Promise(r => setTimeout(r, 10));
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}"""


def play_without_browser(demo, tab: str, tokens: int) -> float:
    """tok/s of the app's own Play handler at max speed, driven in this process with no browser: the same
    generator Gradio streams, each update encoded as Gradio would send it (`bundle.encode`), from a fresh prefill
    of STORY with `tab` open, until `tokens` tokens were generated. What Play costs beside the model's steps when
    no browser shares the cores."""
    from inspector.ui import model_thread
    from inspector.ui.bundle import encode, is_skip, pack

    h = demo.handlers
    key = next(p.key for p in h.page.panels.values() if getattr(p, "title", None) == tab)
    sid, _ = h.prefill(None, STORY, True, "", 0, 0, 1, 0, 0, tokens + 16, 0, 0)
    h.open_tab(sid, key, 0, 0)
    model_thread.settle()  # the tab's run-ahead forward has run: Play starts from a quiet model thread
    visitor = h.store.get(sid)
    start = len(visitor.session.generated_ids)
    t0 = time.perf_counter()
    for update in h.play(sid, 0, 0, 1, 0, 0, 0, 0, None, True):
        packed = pack(update)
        if not is_skip(packed):
            encode(packed)
        if len(visitor.session.generated_ids) - start >= tokens:
            h.pause(sid)
    rate = (len(visitor.session.generated_ids) - start) / (time.perf_counter() - t0)
    h.store.reset(sid)
    return rate


# A load on another core that takes `share` of a core in bursts of `burst_ms` of work, as the renderer's tasks
# come while Play draws: busy, then idle for the rest of each burst's period, until killed.
BURSTS = """import sys, time
share, busy = float(sys.argv[1]), float(sys.argv[2]) / 1000
while True:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < busy:
        pass
    time.sleep(busy * (1 - share) / share)
"""


def engine_beside_load(run_engine, share: float, burst_ms: float = 20.0) -> float:
    """tok/s of `run_engine()` (an engine-alone run: (ms per step, tok/s)) while another process takes `share` of
    a core in bursts (`BURSTS`): what Play could keep beside a browser whose work weighed on the cores as that load
    does, were Play's own work between steps free."""
    load = subprocess.Popen([sys.executable, "-c", BURSTS, str(share), str(burst_ms)])
    try:
        time.sleep(0.3)  # the load has started
        return run_engine()[1]
    finally:
        load.kill()
        load.wait()


def open_pattern(page, cdp) -> dict[str, float]:
    """Open the Attention tab on a prefill (no position selected: it draws the prompt's whole pattern): ms to the
    pattern painted, the renderer's task ms meanwhile, the bundle's size (the largest encode since `before`)."""
    from inspector.ui import bundle

    sizes, encode = [], bundle.encode

    def measured(value):
        text = encode(value)
        sizes.append(len(text))
        return text

    bundle.encode = measured
    try:
        before = metrics(cdp)
        ms = page.evaluate(OPEN_PATTERN_TO_PAINT, "Attention")
        after = metrics(cdp)
    finally:
        bundle.encode = encode
    return {"ms": ms, "tasks_ms": (after["TaskDuration"] - before["TaskDuration"]) * 1000,
            "bytes": max(sizes, default=0)}


def long_prompt(tokenizer, n: int) -> str:
    """A plain prompt of about `n` tokens (English prose, repeated with numbered paragraphs)."""
    para = ("The river runs past the old mill, where the miller keeps a ledger of every sack of grain that "
            "comes in from the farms on the hill. In spring the water rises and the wheel turns faster, and "
            "the children of the village come to watch the stones grind the wheat into flour. ")
    text, i = "", 0
    while len(tokenizer.encode(text)) < n:
        i += 1
        text += f"Paragraph {i}. " + para
    ids = tokenizer.encode(text)[:n]
    return tokenizer.decode(ids)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.page")
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--play-tokens", type=int, default=64)
    ap.add_argument("--play-s", type=float, default=6.0)
    ap.add_argument("--long-tokens", type=int, default=2840)
    ap.add_argument("--long-steps", type=int, default=5)
    ap.add_argument("--profile", default="", help="a view tab: only profile the renderer over --steps Steps there "
                    "(short context; with --long-tokens > 0 at long context), print the heaviest functions")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: load, steps, play, long")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    from playwright.sync_api import sync_playwright

    from bench.ui import engine_alone_factory
    from harness.app_server import start_app
    from inspector.models.loader import load_model
    from inspector.ui import model_thread

    if args.profile and args.long_tokens:
        os.environ["INSPECTOR_MAX_PROMPT_TOKENS"] = "4096"  # the profiled app takes the long prompt
    loaded = model_thread.call_prefill(load_model)  # as the app does (inspector.ui.app.build_app)
    server = ServerTimes()  # patched before any app is built
    rows: list[tuple[str, str, str, str]] = []  # measurement, target, measured, note
    uptime = lambda: os.getloadavg()  # noqa: E731
    rows.append(("machine load (1/5/15 min) at start", "", "%.2f / %.2f / %.2f" % uptime(), ""))

    with sync_playwright() as p:
        browser = chromium(p)
        mini, floor_demo = minimal_page(), floor_page()
        demo = start_app(loaded)
        app_ready, mini_ready = "#status-line", "#mini-plot .main-svg"
        if "load" not in skip:
            ours, peer = [], []
            # the first load of each server (its first /config and static files) is shown apart, not counted
            cold = (load_once(browser, mini.local_url, mini_ready), load_once(browser, demo.local_url, app_ready))
            for _ in range(args.loads):
                peer.append(load_once(browser, mini.local_url, mini_ready))
                ours.append(load_once(browser, demo.local_url, app_ready))
            ratio = statistics.median(ours) / statistics.median(peer)
            rows.append(("load: navigation → status line (app) / → plot drawn (minimal page), medians",
                         "≤ 1.5× the minimal page", f"{ratio:.2f}×",
                         f"app {statistics.median(ours):.2f} s ({', '.join(f'{t:.2f}' for t in ours)}); minimal "
                         f"{statistics.median(peer):.2f} s ({', '.join(f'{t:.2f}' for t in peer)}); each server's first load: "
                         f"app {cold[1]:.2f} s, minimal {cold[0]:.2f} s"))
            shot, mshot = (first_screen(browser, demo.local_url, APP_READY),
                           first_screen(browser, mini.local_url, mini_ready))
            rows.append(("DOM nodes at the first screen (CDP Nodes)", "≤ 8,000", f"{shot['nodes']:,.0f}",
                         f"{shot['elements']:,} elements, JS heap {shot['heap_mb']:.0f} MB; minimal page "
                         f"{mshot['nodes']:,.0f} nodes, {mshot['heap_mb']:.0f} MB"))

        page, cdp = opened(browser, demo.local_url)
        if args.profile:
            if args.long_tokens:
                prefill(page, long_prompt(loaded.tokenizer, args.long_tokens), chat=False, max_new=64,
                        timeout_ms=600_000)
            else:
                prefill(page, "What is gravity?")
            open_tab(page, args.profile)
            page.wait_for_timeout(4000 if args.long_tokens else 800)  # the tab's own draw is not a Step's
            clicks = lambda: [page.evaluate(CLICK_TO_PAINT, "step-btn") or page.wait_for_timeout(300)  # noqa
                              for _ in range(args.steps)]
            for ms, name in cpu_profile(cdp, clicks):
                print(f"{ms / args.steps:8.1f} ms/Step  {name}")
            for ms, name in trace_events(browser, page, clicks):
                print(f"{ms / args.steps:8.1f} ms/Step  trace {name}")
            return
        if "steps" not in skip:
            mini_per = per_click(browser, mini.local_url, "#mini-plot .main-svg", minimal_click, args.steps)
            rows.append((f"peer: the minimal page's renderer main thread per button click (its plot redrawn, mean of "
                         f"{args.steps})", "", f"{mini_per['TaskDuration']:.0f} ms",
                         f"script {mini_per['ScriptDuration']:.0f}, layout {mini_per['LayoutDuration']:.0f} ms; "
                         f"traced: tasks {mini_per['trace_wall_ms']:.0f} ms, of them CPU {mini_per['cpu_ms']:.0f} ms: "
                         "what one plain Gradio update costs on this machine now"))
            floor = per_click(browser, floor_demo.local_url, "#floor-html p", floor_click, args.steps)
            rows.append((f"peer: Gradio's floor, a page whose button updates one gr.HTML line (mean of {args.steps})",
                         "", f"{floor['TaskDuration']:.0f} ms",
                         f"script {floor['ScriptDuration']:.0f}, layout {floor['LayoutDuration']:.0f} ms; traced: tasks "
                         f"{floor['trace_wall_ms']:.0f} ms, of them CPU {floor['cpu_ms']:.0f} ms: the least a Gradio "
                         "event with one output costs the renderer here (the click, the queue's messages, one update)"))
            prefill(page, "What is gravity?")
            opened_at = open_pattern(page, cdp)
            rows.append(("Attention tab opened after a short prefill (its first opening on this page): click → the "
                         "prompt's pattern painted", "", f"{opened_at['ms']:.0f} ms",
                         f"renderer tasks {opened_at['tasks_ms']:.0f} ms (no target)"))
            for tab in STEP_TABS:
                per = steps_on_tab(page, cdp, tab, args.steps, server, browser=browser)
                rows.append((f"renderer main thread per Step, {tab} tab (mean of {args.steps}): tasks",
                             "≤ 60 ms" if tab == STEP_TABS[0] else "(≤ 60 ms)", f"{per['TaskDuration']:.0f} ms",
                             f"script {per['ScriptDuration']:.0f}, layout {per['LayoutDuration']:.0f}, style "
                             f"{per['RecalcStyleDuration']:.0f} ms; traced: tasks {per['trace_wall_ms']:.0f} ms, of "
                             f"them CPU {per['cpu_ms']:.0f} ms; click → token {per['token_ms']:.0f} ms, "
                             f"→ views {per['views_ms']:.0f} ms"))
                if tab == STEP_TABS[0]:
                    first = per
                prefill(page, "What is gravity?")  # each tab from the same short context
            rows.append((f"renderer CPU per Step, {STEP_TABS[0]} tab, against the minimal page's click (traced)", "",
                         f"{first['cpu_ms'] / mini_per['cpu_ms']:.2f}×",
                         f"{first['cpu_ms']:.0f} ms vs {mini_per['cpu_ms']:.0f} ms of CPU; of their tasks' wall time "
                         f"({first['trace_wall_ms']:.0f} ms, {mini_per['trace_wall_ms']:.0f} ms) the rest is time inside "
                         "those tasks off the CPU (waiting for a core, on a loaded machine)"))
            cdp.send("HeapProfiler.collectGarbage")
            m = metrics(cdp)
            rows.append(("DOM nodes after Steps on every view tab (CDP Nodes)", "", f"{m['Nodes']:,.0f}",
                         f"JS heap {m['JSHeapUsedSize'] / 2**20:.0f} MB"))

        if "play" not in skip:
            all_threads, app_threads = model_thread.ALL_THREADS, model_thread.decode_threads()
            engine = engine_alone_factory(loaded)
            cli_before, played = cli_tok_s(STORY, args.play_tokens), []
            for tab in PLAY_TABS:
                # (median ms per step, tok/s) of the engine alone on each thread the app runs the model on
                before = {n: run(engine(STORY, args.play_tokens)) for n, run in
                          ((all_threads, model_thread.call_prefill), (app_threads, model_thread.call))}
                got = play_on_tab(browser, page, tab, args.play_tokens, args.play_s)
                after = {n: run(engine(STORY, args.play_tokens)) for n, run in
                         ((all_threads, model_thread.call_prefill), (app_threads, model_thread.call))}
                # the steps Play took in the findings' window, as the app's records timed them (record i, i >= 1,
                # is the decode step that made generated token i + 1)
                visitor = next(v for v in demo.store.live() if v.session is not None)
                lo, hi = got["window_tokens"]
                in_window = visitor.session.records[max(1, lo):max(2, hi)]
                played.append({**got, "tab": tab, "peer": max((before[n][1] + after[n][1]) / 2 for n in before),
                               "alone_ms": (before[app_threads][0] + after[app_threads][0]) / 2,
                               "play_ms": statistics.median(r.forward_ms + r.sample_ms for r in in_window)})
            cli_after = cli_tok_s(STORY, args.play_tokens)
            cli = (cli_before + cli_after) / 2
            for got in played:
                rows.append((f"Play at max, {got['tab']} tab: bench.ui's protocol ({args.play_tokens} tokens from "
                             "the click, engine alone in-process)", "≥ 0.85×", f"{got['bench_ui'] / got['peer']:.2f}×",
                             f"{got['bench_ui']:.1f} tok/s vs {got['peer']:.1f} (first token on the page after "
                             f"{got['first_ms']:.0f} ms)"))
                rows.append((f"Play at max, {got['tab']} tab: the findings' protocol ({args.play_s:.0f} s from "
                             "the first token, `inspector run` as the peer)", "≥ 0.85×", f"{got['window'] / cli:.2f}×",
                             f"{got['window']:.1f} tok/s vs {cli:.1f} (before {cli_before:.1f}, after "
                             f"{cli_after:.1f}); the same window against the in-process engine: "
                             f"{got['window'] / got['peer']:.2f}×"))
                cores = "; ".join(f"{name} {used:.2f}" for name, used in got["cores"].items())
                rows.append((f"Play at max, {got['tab']} tab: where the time goes (the findings' window)", "",
                             f"{got['play_ms']:.1f} ms vs {got['alone_ms']:.1f} ms",
                             f"the model's step (forward + sample, median, the app's records) during Play against "
                             f"the engine alone on the app's decode thread ({app_threads} torch thread"
                             f"{'s' if app_threads > 1 else ''}); Play's {got['window']:.1f} tok/s are "
                             f"{got['window'] * got['play_ms'] / 1000:.2f}× its own steps' rate (1000 / step ms: the "
                             f"rest is the work between steps); cores in use (CPU s per s): {cores}"))
        page.close()
        if "play" not in skip:  # no browser page from here on: Play driven in this process alone
            alone_threads = {}  # threads -> (engine alone tok/s, Play without a browser tok/s per tab)
            beside_load = {}  # threads -> engine alone tok/s beside a load of the browser's share
            share = statistics.median(got["cores"]["browser (Chromium)"] for got in played)
            with mock.patch.dict(os.environ):  # the thread count the run was started with comes back after
                for threads in sorted({app_threads, all_threads}):
                    os.environ["INSPECTOR_DECODE_THREADS"] = str(threads)  # read at each model call
                    run_alone = lambda: model_thread.call(engine(STORY, args.play_tokens))  # noqa: E731
                    alone = statistics.mean(run_alone()[1] for _ in range(2))
                    alone_threads[threads] = (alone, {tab: play_without_browser(demo, tab, args.play_tokens)
                                                      for tab in PLAY_TABS})
                    beside_load[threads] = statistics.mean(engine_beside_load(run_alone, share) for _ in range(2))
            best = max(a for a, _ in alone_threads.values())
            for threads, (alone, by_tab) in alone_threads.items():
                low, high = min(by_tab.values()), max(by_tab.values())
                rows.append((f"Play at max with no browser, the decode thread at {threads} torch thread"
                             f"{'s' if threads > 1 else ''}{' (the app)' if threads == app_threads else ''}: the "
                             f"app's Play handler driven in this process, {args.play_tokens} tokens per tab",
                             "", f"{low / best:.2f}–{high / best:.2f}×",
                             f"{low:.1f}–{high:.1f} tok/s ({', '.join(f'{t} {r:.1f}' for t, r in by_tab.items())}) "
                             f"against the engine alone at its best thread count, {best:.1f} tok/s; the engine alone "
                             f"at {threads}: {alone:.1f} tok/s, so Play's own work between steps leaves "
                             f"{low / alone:.2f}–{high / alone:.2f}× of it"))
            for threads, rate in beside_load.items():
                rows.append((f"Play's ceiling with a browser on these cores: the engine alone at {threads} torch "
                             f"thread{'s' if threads > 1 else ''}, no Play, beside a load of the browser's share "
                             f"during Play ({share:.2f} core, the median over the tabs above, in 20 ms bursts)",
                             "", f"{rate / cli:.2f}× `inspector run`, {rate / best:.2f}× in-process",
                             f"{rate:.1f} tok/s against `inspector run` ({cli:.1f}, the findings' peer) and the engine "
                             f"alone in this process at its best thread count with nothing beside it ({best:.1f}; at "
                             f"{threads} alone: {alone_threads[threads][0]:.1f}): what the engine itself keeps beside "
                             "a load of that size, before any work of Play's between steps"))
        demo.close()

        if "long" not in skip:
            os.environ["INSPECTOR_MAX_PROMPT_TOKENS"] = "4096"
            demo = start_app(loaded)
            page, cdp = opened(browser, demo.local_url)
            prompt = long_prompt(loaded.tokenizer, args.long_tokens)
            prefill(page, prompt, chat=False, max_new=64, timeout_ms=600_000)
            n_prompt = page.locator("#token-count").get_attribute("data-prompt")
            opened_at = open_pattern(page, cdp)
            rows.append((f"Attention tab opened after the prefill of {n_prompt} tokens: click → the prompt's pattern "
                         "painted", "", f"{opened_at['ms']:.0f} ms",
                         f"bundle {opened_at['bytes'] / 2**20:.1f} MiB; renderer tasks {opened_at['tasks_ms']:.0f} ms "
                         "(no target: a long context's first look at attention)"))
            open_tab(page, "Residual stream")
            for tab in ("Residual stream", "Attention"):
                per = steps_on_tab(page, cdp, tab, args.long_steps, server, settle_ms=4000)
                visitor = next(v for v in demo.store.live() if v.session is not None)
                recs = visitor.session.records[-args.long_steps:]
                tpot = statistics.median(r.forward_ms + r.sample_ms for r in recs)
                srv = per["rows"]
                med = lambda key: statistics.median(r.get(key, 0.0) for r in srv) if srv else float("nan")  # noqa
                rows.append((f"Step at {n_prompt} prompt tokens, {tab} tab: click → views painted (median of "
                             f"{args.long_steps})", f"≤ TPOT + 120 = {tpot + 120:.0f} ms", f"{per['views_ms']:.0f} ms",
                             f"→ token {per['token_ms']:.0f} ms; TPOT {tpot:.0f} ms; server handler "
                             f"{med('handler_ms'):.0f} ms (views {med('views_ms'):.0f}), encode "
                             f"{med('encode_ms'):.0f} ms, bundle {med('bytes') / 1024:.0f} KiB; renderer tasks "
                             f"{per['TaskDuration']:.0f} ms (script {per['ScriptDuration']:.0f}, layout "
                             f"{per['LayoutDuration']:.0f})"))
            page.close()
            demo.close()
        mini.close()
        floor_demo.close()
        browser.close()

    rows.append(("machine load (1/5/15 min) at the end", "", "%.2f / %.2f / %.2f" % uptime(), ""))
    print("| measurement | target | measured | note |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
