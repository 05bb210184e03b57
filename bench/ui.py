"""UI benchmark (Playwright + Debian chromium, the real default model): prints a markdown table.

- Step click-to-paint: click Step -> the new token is painted (status line, chips, text: the first update),
  and -> the open tab's views are painted too (the last update marks the step it drew in #views-drawn), two
  animation frames after each; median over N rounds, each round opening every view tab in turn and stepping
  once (interleaved, so a slow spell on a shared machine hits every tab alike).
  The app runs each next decode forward ahead, while the page shows the last token (`Session.forward_ahead`),
  so a Step click only samples and draws. Peers in the same run: the same clicks on an app that runs the
  forward when Step is clicked (INSPECTOR_RUN_AHEAD=0), and the engine's own step time (forward +
  sampling) from the records, alone in this process with all torch threads and with the app's decode
  thread count (`inspector.ui.model_thread`), set up as the app's sessions are (`new_ui_session`: no
  logit lens per step), after a warm-up run.
- Step clicked again as soon as the last one is painted (a quick clicker), on the Timing tab: what a next
  forward run ahead still being computed costs a Step (same two apps).
- Where a Step's time goes, per tab (in-process timers around the app's own functions, not in the app):
  the server's handler (the step itself, then drawing the views), encoding the one bundle of views as JSON
  and its size, the largest view in it; and in the page, when the Step request left and its answer came
  back, so the rest of click-to-paint is the browser's (Chromium shares the 2 cores with the server).
- Play tokens/s with views on, on every view tab, at the page's fastest Play speed: tokens that reached the page / wall time,
  and how many updates the page got (at that speed Play sends at most 5 a second, each with every token
  since the last);
  peer, measured just before and just after (averaged): the engine alone, same prompt and length, with all
  threads and with the app's decode thread count. Beside it, where Play's time went, per token: the step in the
  app (forward + sample, from the session's records, median) against the engine alone's; the CPU time of the
  model thread, of the rest of this process (Gradio: encoding and sending the updates; with more than one decode
  thread, also the decode team's other threads) and of the browser (every
  Chromium process: CDP `SystemInfo.getProcessInfo`). CPU times hold on a loaded machine where wall times drift:
  on 2 cores, the browser and Gradio share the core the model's one decode thread leaves.
- Cold start: `python app.py` process start -> page usable (Prefill button visible).

Usage: python -m bench.ui [--steps 8] [--play-tokens 64] [--play-only] [--tabs Attention,KV cache]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.net import HOST, free_port, wait_for_http
from harness.app_server import TOUR_SEEN_JS

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# Waits on MutationObservers, not a polling loop: a loop would take CPU from the server on 2 cores.
# Returns [ms until the new token is painted (status, chips, text), ms until the open tab's plots are too,
# ms until the Step request is sent, ms until its answer's headers arrive].
CLICK_TO_PAINT = """async (id) => {
  const watch = (sel, read) => {
    const before = read();
    return new Promise(resolve => {
      const obs = new MutationObserver(() => { if (read() !== before) { obs.disconnect(); resolve(); } });
      obs.observe(document.querySelector(sel), {subtree: true, childList: true, characterData: true,
                                                attributes: true});
    });
  };
  const paint = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const phase = () => { const p = document.querySelector('#status-phase'); return p ? p.textContent : ''; };
  const drawn = () => { const m = document.querySelector('#views-drawn-step'); return m ? m.dataset.step : ''; };
  const token = watch('#status', phase), views = watch('#views-drawn', drawn);
  // when the page sends the Step request and when its answer arrives (Gradio's client uses fetch)
  const fetch0 = window.fetch;
  let sent = NaN, answered = NaN;
  window.fetch = function (...args) {
    const url = String((args[0] && args[0].url) || args[0]);
    const mine = Number.isNaN(sent) && (url.includes('/run/') || url.includes('queue/join'));
    if (mine) sent = performance.now();
    const reply = fetch0.apply(this, args);
    if (mine) reply.then(() => { answered = performance.now(); });
    return reply;
  };
  const t0 = performance.now();
  document.getElementById(id).click();
  // each from its own change: two frames after the token changed, two frames after the views changed
  const painted = (change) => change.then(paint).then(() => performance.now() - t0);
  const [tToken, tViews] = await Promise.all([painted(token), painted(views)]);
  window.fetch = fetch0;
  return [tToken, tViews, sent - t0, answered - t0];
}"""

# Counts the page's token updates during Play (the generated-token count changing) into window.benchUpdates.
COUNT_UPDATES = """() => {
  if (window.benchObserver) window.benchObserver.disconnect();
  window.benchUpdates = 0;
  const count = () => { const c = document.querySelector('#token-count'); return c ? c.dataset.generated : ''; };
  let last = count();
  window.benchObserver = new MutationObserver(() => {
    const now = count();
    if (now !== last) { last = now; window.benchUpdates++; }
  });
  window.benchObserver.observe(document.querySelector('#status'), {subtree: true, childList: true, attributes: true});
}"""


def chromium(p):
    import shutil
    path = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
    return p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)


def cold_start(p) -> float:
    """Seconds from `python app.py` to a usable page."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": HOST}
    url = f"http://{HOST}:{port}/"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        browser = chromium(p)
        page = browser.new_page()
        page.add_init_script(TOUR_SEEN_JS)
        wait_for_http(url, proc, timeout_s=300, interval_s=0.1)
        page.goto(url)
        page.locator("#prefill-btn").wait_for(state="visible", timeout=120_000)
        page.locator("#status-phase").wait_for(state="visible", timeout=120_000)
        elapsed = time.perf_counter() - t0
        browser.close()
        return elapsed
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def open_page(p, demo):
    """A browser on the app with a prefilled prompt: (browser, page)."""
    browser = chromium(p)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.add_init_script(TOUR_SEEN_JS)
    page.goto(demo.local_url)
    page.locator("#status-line").wait_for(timeout=120_000)
    page.locator("#prompt textarea").fill("What is gravity?")
    page.locator("#max-new-tokens input").fill("200")
    page.locator("#prefill-btn").click()
    page.locator("#status-phase", has_text="prefill done").wait_for(timeout=120_000)
    return browser, page


TABS = ("Residual stream", "Attention", "KV cache", "Sampling", "Timing")
PLAY_TABS = ("Residual stream", "Attention", "KV cache", "Sampling", "Tensor inventory", "Timing", "Beams")
# every view tab of the default model (Routing shows only for a mixture of experts)


def open_tab(page, label: str) -> None:
    """Open a view tab by its label (static/app.js opens its group first)."""
    if not page.evaluate("(label) => window.inspectorOpenTab(label)", label):
        raise SystemExit(f"the page has no tab named {label!r}")


class ServerTimes:
    """Timers around the app's step handler, its view drawing and the bundle's JSON encoding (patched on the
    classes and module before the app is built; the app itself carries no timers)."""

    def __init__(self) -> None:
        from inspector.ui import bundle, handlers

        self.rows: list[dict] = []  # one per Step: handler ms, views ms, encode ms, bytes, largest view
        self._current: dict = {}
        step, views, encode = handlers.Handlers.step, handlers.Handlers.views, bundle.encode
        me = self

        def timed_step(h, *args):
            me._current = {}
            t0 = time.perf_counter()
            out = step(h, *args)
            me._current["handler_ms"] = (time.perf_counter() - t0) * 1000
            return out

        def timed_views(h, *args, **kwargs):
            t0 = time.perf_counter()
            out = views(h, *args, **kwargs)
            me._current["views_ms"] = me._current.get("views_ms", 0.0) + (time.perf_counter() - t0) * 1000
            return out

        def timed_encode(value):
            t0 = time.perf_counter()
            text = encode(value)
            if "handler_ms" in me._current:  # the Step's own bundle (not a tab's select or a preview)
                sizes = {k: len(encode({k: v})) for k, v in value.items()}
                me._current.update(encode_ms=(time.perf_counter() - t0) * 1000, bytes=len(text),
                                   largest=max(sizes, key=sizes.get), largest_bytes=max(sizes.values()))
                me.rows.append(me._current)
                me._current = {}
            return text

        handlers.Handlers.step, handlers.Handlers.views, bundle.encode = timed_step, timed_views, timed_encode


def step_clicks(page, steps: int, server: ServerTimes) -> dict[str, list]:
    """{tab: [[ms to the new token, ms to all views, server row], ...]}: `steps` rounds, each opening every
    tab in turn and clicking Step once."""
    per_tab = {tab: [] for tab in TABS}
    for _ in range(steps):
        for tab, times in per_tab.items():
            open_tab(page, tab)
            page.wait_for_timeout(500)  # the tab's own redraw (its select event) settles first
            n = len(server.rows)
            clicked = page.evaluate(CLICK_TO_PAINT, "step-btn")
            times.append([*clicked[:2], server.rows[n] if len(server.rows) > n else {}, *clicked[2:]])
    return per_tab


def rapid_clicks(page, steps: int) -> list[float]:
    """Step clicked again as soon as the last Step's views are painted (a person clicking as fast as the page
    answers), on the Timing tab: ms to all views per click. A run-ahead forward that has not finished by then
    is waited for, so this shows what holding back or slowing the run-ahead would cost."""
    open_tab(page, "Timing")
    page.wait_for_timeout(500)
    page.evaluate(CLICK_TO_PAINT, "step-btn")  # the first click of the burst follows a pause: not counted
    return [page.evaluate(CLICK_TO_PAINT, "step-btn")[1] for _ in range(steps)]


def fastest_play(page) -> str:
    """Set the page's Play speed control, if it has one, to its fastest; returns what was set."""
    box = page.locator("[id*=speed] input[type=number]")
    if box.count() == 0:
        return "no speed control: Play runs as fast as it can"
    top = box.first.get_attribute("max")
    if top is None:  # a free number box (no max of its own): its "max" tick plays as fast as the model goes
        return "the Speed control's 'max' ticked"
    box.first.fill(top)
    box.first.press("Tab")
    return f"speed set to its maximum, {top}"


def engine_alone_factory(loaded):
    """`engine_alone(prompt, steps)`: the engine with no page, as the app sets it up (`new_ui_session`: the logit
    lens only when asked for, as the page asks on its Residual tab); calling what it returns runs a warm-up run
    first (the first forwards page the weights in), then prefill + `steps` decode steps: (median ms per step
    from the records, tokens/s by the wall clock)."""
    from inspector.engine.config import SamplingParams
    from inspector.ui.visitors import new_ui_session

    def engine_alone(prompt: str, steps: int) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            for n in (2, steps):
                s = new_ui_session(loaded)
                s.prefill(prompt, SamplingParams(), chat=True, max_new_tokens=steps + 8)
                t0 = time.perf_counter()
                for _ in range(n):
                    s.step(SamplingParams())
            elapsed = time.perf_counter() - t0
            return statistics.median(r.forward_ms + r.sample_ms for r in s.records[1:]), steps / elapsed
        return run
    return engine_alone


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ui")
    ap.add_argument("--steps", type=int, default=8, help="Step clicks per tab")
    ap.add_argument("--play-tokens", type=int, default=64, help="tokens per Play measurement (0: skip Play and "
                    "cold start, only the Step clicks)")
    ap.add_argument("--play-only", action="store_true", help="only the Play measurements (no Step clicks, no cold "
                    "start)")
    ap.add_argument("--tabs", default="", help="comma-separated view tabs to Play on (default: every one)")
    args = ap.parse_args()
    play_tabs = tuple(t.strip() for t in args.tabs.split(",") if t.strip()) or PLAY_TABS

    from playwright.sync_api import sync_playwright

    from inspector.models.loader import load_model
    from harness.app_server import start_app

    from inspector.ui import model_thread

    all_threads, app_threads = model_thread.ALL_THREADS, model_thread.decode_threads()
    loaded = model_thread.call_prefill(load_model)  # as the app does (inspector.ui.app.build_app)
    engine_alone = engine_alone_factory(loaded)

    rows = []
    with sync_playwright() as p:
        if not args.play_only:
            rows += step_rows(p, loaded, engine_alone, args.steps, all_threads, app_threads)
        os.environ["INSPECTOR_RUN_AHEAD"] = "1"
        demo = start_app(loaded)
        browser, page = open_page(p, demo)
        if args.play_tokens > 0:
            rows += play_rows(browser, page, demo, engine_alone, args.play_tokens, play_tabs, all_threads, app_threads)
        os.environ.pop("INSPECTOR_RUN_AHEAD")
        browser.close()
        demo.close()
        if args.play_tokens > 0 and not args.play_only:
            cold = cold_start(p)
            rows.append(("Cold start (python app.py → page usable)", f"{cold:.1f} s", ""))

    print(f"load average (1/5/15 min) at the end: {'%.2f / %.2f / %.2f' % os.getloadavg()}\n")
    print("| measurement | value | note |\n|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def step_rows(p, loaded, engine_alone, steps: int, all_threads: int, app_threads: int) -> list[tuple]:
    """The Step clicks' rows: the app as it ships (each next forward run ahead) against the same clicks when
    Step runs its own forward (INSPECTOR_RUN_AHEAD=0) and the engine alone."""
    from harness.app_server import start_app
    from inspector.ui import model_thread

    # peer: the engine alone, same prompt, same process: all torch threads (the prefill thread), and the app's
    # decode count (the decode thread)
    alone = {n: on_thread(engine_alone("What is gravity?", max(8, steps)))[0]
             for n, on_thread in ((all_threads, model_thread.call_prefill), (app_threads, model_thread.call))}
    engine_ms = alone[all_threads]
    rows = []
    measured, rapid = {}, {}
    server = ServerTimes()
    for run_ahead in ("0", "1"):
        os.environ["INSPECTOR_RUN_AHEAD"] = run_ahead
        demo = start_app(loaded)
        browser, page = open_page(p, demo)
        per_tab = step_clicks(page, steps, server)
        visitor = demo.store.live()[0]
        measured[run_ahead] = (per_tab, statistics.median(r.forward_ms + r.sample_ms
                                                          for r in visitor.session.records[1:]))
        rapid[run_ahead] = statistics.median(rapid_clicks(page, steps))
        browser.close()
        demo.close()
    os.environ.pop("INSPECTOR_RUN_AHEAD")

    def medians(ts: list) -> str:
        return f"{statistics.median(t[0] for t in ts):.0f} / {statistics.median(t[1] for t in ts):.0f} ms"

    for tab, ts in measured["1"][0].items():
        rows.append((f"Step click-to-paint, {tab} tab open (median of {len(ts)}): new token / all views",
                     medians(ts), f"peer, no run-ahead: {medians(measured['0'][0][tab])}"))
    for tab, ts in measured["1"][0].items():
        rows_ = [t[2] for t in ts if t[2]]
        if not rows_:
            continue
        med = lambda key: statistics.median(r.get(key, 0.0) for r in rows_)  # noqa: E731
        largest = max(set(r["largest"] for r in rows_), key=[r["largest"] for r in rows_].count)
        rows.append((f"where a Step's time goes, {tab} tab: server handler (its views) / JSON encode / bundle",
                     f"{med('handler_ms'):.0f} ({med('views_ms'):.0f}) / {med('encode_ms'):.1f} ms / "
                     f"{med('bytes') / 1024:.0f} KiB",
                     f"largest view {largest}: {med('largest_bytes') / 1024:.0f} KiB"))
        rows.append((f"where a Step's time goes, {tab} tab: click → request sent / answer arrived / token painted "
                     "/ views painted", " / ".join(f"{statistics.median(t[i] for t in ts):.0f}" for i in (3, 4, 0, 1))
                     + " ms", "in the page (performance.now): sent − click is the page's own work before the "
                              "request, arrived − sent is Gradio's server and the network"))
    for run_ahead, what, note in (("1", "next forward run ahead (as shipped)", "goal ≤ 80 ms (all views)"),
                                  ("0", "Step runs its own forward (INSPECTOR_RUN_AHEAD=0)", "peer")):
        per_tab, engine = measured[run_ahead]
        rows.append((f"Step click-to-paint, all tabs (median), {what}: new token / all views",
                     medians([t for ts in per_tab.values() for t in ts]), note))
        rows.append((f"engine step in the app, {what} (forward + sample, median)", f"{engine:.0f} ms", ""))
        rows.append((f"Step clicked again as soon as the last one is painted, Timing tab, {what}: all views "
                     f"(median of {steps})", f"{rapid[run_ahead]:.0f} ms",
                     "a run-ahead forward not finished by the next click is waited for"))
    rows.append((f"engine step alone, {all_threads} torch threads (forward + sample, median)",
                 f"{engine_ms:.0f} ms", "peer"))
    rows.append((f"engine step alone, {app_threads} torch thread(s) as the app decodes",
                 f"{alone[app_threads]:.0f} ms", "peer"))
    return rows


def browser_cpu_s(browser) -> float:
    """CPU seconds of every process of `browser` so far (CDP `SystemInfo.getProcessInfo`)."""
    cdp = browser.new_browser_cdp_session()
    try:
        return sum(proc["cpuTime"] for proc in cdp.send("SystemInfo.getProcessInfo")["processInfo"])
    finally:
        cdp.detach()


def cpu_s(browser) -> tuple[float, float, float]:
    """CPU seconds so far: of the app's decode thread (asked on it, so after its current step), of this whole
    process (the app, Gradio, Playwright's client) and of every process of `browser`."""
    from inspector.ui import model_thread

    return model_thread.call(time.thread_time), time.process_time(), browser_cpu_s(browser)


def play_rows(browser, page, demo, engine_alone, tokens: int, tabs: tuple[str, ...], all_threads: int,
              app_threads: int) -> list[tuple]:
    """Play with views on, at the fastest speed, on every view tab in `tabs` (the goal holds for each): tok/s
    against the engine alone on the same prompt and length, with the threads the app decodes with and with
    all threads, measured just before and just after each Play, the two averaged (a shared machine's load
    drifts: a peer measured on one side only was seen to move ±10% between tabs); and where Play's time went,
    per token (CPU times: the model thread, the rest of this process, the browser)."""
    from inspector.ui import model_thread

    rows = []
    speed = fastest_play(page)
    story = "Write a long story about a dragon who learns to bake bread."

    def engine_peers() -> dict[int, tuple[float, float]]:
        return {n: on_thread(engine_alone(story, tokens))
                for n, on_thread in ((all_threads, model_thread.call_prefill), (app_threads, model_thread.call))}

    for tab in tabs:
        before = engine_peers()
        open_tab(page, tab)
        page.locator("#prompt textarea").fill(story)
        page.locator("#prefill-btn").click()
        page.locator("#status-phase", has_text="prefill done").wait_for(timeout=120_000)
        page.wait_for_timeout(500)
        start = int(page.locator("#token-count").get_attribute("data-generated"))
        if not page.locator("#play-max input").is_checked():
            page.locator("#play-max input").check()  # Play as fast as the model goes (the Speed control's max)
        page.evaluate(COUNT_UPDATES)
        model_thread.settle()
        cpu0 = cpu_s(browser)
        t0 = time.perf_counter()
        page.locator("#play-btn").click()
        page.wait_for_function(
            f"Number(document.querySelector('#token-count').dataset.generated) >= {start + tokens}"
            " || document.querySelector('#status-line').dataset.phase.startsWith('finished')",
            timeout=600_000, polling=20)
        elapsed = time.perf_counter() - t0
        got = int(page.locator("#token-count").get_attribute("data-generated")) - start
        cpu1 = cpu_s(browser)
        page.evaluate("document.getElementById('pause-btn').click()")  # as the space shortcut does
        page.wait_for_function("!document.querySelector('#status-line').dataset.phase.includes('playing')",
                               timeout=120_000)
        records = demo.store.live()[0].session.records[start:start + got]
        play_tps = got / elapsed
        updates = page.evaluate("window.benchUpdates")
        after = engine_peers()
        peers = {n: (before[n][1] + after[n][1]) / 2 for n in before}
        peer_ms = {n: (before[n][0] + after[n][0]) / 2 for n in before}
        best = max(peers.values())
        model_ms, process_ms, browser_ms = ((b - a) * 1000 / max(got, 1) for a, b in zip(cpu0, cpu1))
        rows.append((f"Play tokens/s with views on, {tab} tab open ({got} tokens; {speed})",
                     f"{play_tps:.1f} tok/s", f"{play_tps / best:.2f}× the engine alone at its best thread count "
                     f"(goal ≥ 0.85×); {play_tps / peers[app_threads]:.2f}× it with the app's decode threads; "
                     f"the page updated {updates} times ({updates / elapsed:.0f}/s)"))
        rows.append((f"engine alone tokens/s, mean of just before and just after (wall clock, {tokens} "
                     f"steps): {all_threads} threads / {app_threads} as the app decodes",
                     f"{peers[all_threads]:.1f} / {peers[app_threads]:.1f} tok/s",
                     f"peer; before {before[all_threads][1]:.1f} / {before[app_threads][1]:.1f}, "
                     f"after {after[all_threads][1]:.1f} / {after[app_threads][1]:.1f}"))
        step_ms = statistics.median(r.forward_ms + r.sample_ms for r in records) if records else float("nan")
        rows.append((f"where Play's time went, {tab} tab, per token: wall / step in the app (forward + sample, "
                     "median) / CPU of the model thread, the rest of the server process, the browser",
                     f"{1000 / play_tps:.0f} / {step_ms:.0f} / {model_ms:.0f}, {process_ms - model_ms:.0f}, "
                     f"{browser_ms:.0f} ms",
                     f"the engine alone's step: {peer_ms[app_threads]:.0f} ms ({app_threads} thread(s)), "
                     f"{peer_ms[all_threads]:.0f} ms ({all_threads})"))
    return rows


if __name__ == "__main__":
    main()
