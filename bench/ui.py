"""UI benchmark (Playwright + Debian chromium, the real default model): prints a markdown table.

- Step click-to-paint: click Step -> the new token is painted (status line, chips, text: the first update),
  and -> the open tab's views are painted too (the last update marks the step it drew in #views-drawn), two
  animation frames after each; median over N rounds, each round opening every view tab in turn and stepping
  once (interleaved, so a slow spell on a shared machine hits every tab alike).
  The app runs each next decode forward ahead, while the page shows the last token (`Session.forward_ahead`),
  so a Step click only samples and draws. Peers in the same run: the same clicks on an app that runs the
  forward when Step is clicked (INSPECTOR_RUN_AHEAD=0), and the engine's own step time (forward +
  sampling) from the records, alone in this process with all torch threads and with the app's decode
  thread count (`inspector.ui.model_thread`).
- Play tokens/s with views on: tokens that reached the page / wall time; peer: engine tokens/s.
- Cold start: `python app.py` process start -> page usable (Prefill button visible).

Usage: python -m bench.ui [--steps 8] [--play-tokens 24]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.net import HOST, free_port, wait_for_http
from tests.ui_server import TOUR_SEEN_JS

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# Waits on MutationObservers, not a polling loop: a loop would take CPU from the server on 2 cores.
# Returns [ms until the new token is painted (status, chips, text), ms until the open tab's plots are too].
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
  const t0 = performance.now();
  document.getElementById(id).click();
  await token;
  await paint();
  const t1 = performance.now();
  await views;
  await paint();
  return [t1 - t0, performance.now() - t0];
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


def step_clicks(page, steps: int) -> dict[str, list]:
    """{tab: [[ms to the new token, ms to all views], ...]}: `steps` rounds, each opening every tab in turn
    and clicking Step once."""
    per_tab = {tab: [] for tab in ("Residual stream", "Attention", "KV cache", "Sampling", "Timing")}
    for _ in range(steps):
        for tab, times in per_tab.items():
            page.get_by_role("tab", name=tab).click()
            page.wait_for_timeout(500)  # the tab's own redraw (its select event) settles first
            times.append(page.evaluate(CLICK_TO_PAINT, "step-btn"))
    return per_tab


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ui")
    ap.add_argument("--steps", type=int, default=8, help="Step clicks per tab")
    ap.add_argument("--play-tokens", type=int, default=24)
    args = ap.parse_args()

    import torch
    from playwright.sync_api import sync_playwright

    from inspector.engine.config import SamplingParams
    from inspector.models.loader import load_model
    from inspector.session.session import Session
    from tests.ui_server import start_app

    from inspector.ui import model_thread

    all_threads, app_threads = model_thread.ALL_THREADS, model_thread.decode_threads()
    loaded = load_model()
    # peer: the engine alone, same prompt, same process: all torch threads (the prefill thread), and the app's
    # decode count (the decode thread)
    alone = {}
    for n, on_thread in ((all_threads, model_thread.run_prefill), (app_threads, model_thread.run)):
        def engine_alone() -> Session:
            s = Session(loaded)
            s.prefill("What is gravity?", SamplingParams(), chat=True, max_new_tokens=64)
            for _ in range(args.steps):
                s.step(SamplingParams())
            return s
        s = on_thread(engine_alone)
        alone[n] = statistics.median(r.forward_ms + r.sample_ms for r in s.records[1:])
    engine_ms = alone[all_threads]

    rows = []
    with sync_playwright() as p:
        # First the peer: the same clicks when Step runs its own forward (INSPECTOR_RUN_AHEAD=0); then the
        # app as it ships (each next forward run ahead), whose page goes on to the Play measurements.
        measured = {}
        for run_ahead in ("0", "1"):
            os.environ["INSPECTOR_RUN_AHEAD"] = run_ahead
            demo = start_app(loaded)
            browser, page = open_page(p, demo)
            per_tab = step_clicks(page, args.steps)
            entry = next(iter(demo.store._entries.values()))
            measured[run_ahead] = (per_tab, statistics.median(r.forward_ms + r.sample_ms
                                                              for r in entry.session.records[1:]))
            if run_ahead == "0":
                browser.close()
                demo.close()
        os.environ.pop("INSPECTOR_RUN_AHEAD")
        def medians(ts: list) -> str:
            return f"{statistics.median(t[0] for t in ts):.0f} / {statistics.median(t[1] for t in ts):.0f} ms"

        for tab, ts in measured["1"][0].items():
            rows.append((f"Step click-to-paint, {tab} tab open (median of {len(ts)}): new token / all views",
                         medians(ts), f"peer, no run-ahead: {medians(measured['0'][0][tab])}"))
        for run_ahead, what, note in (("1", "next forward run ahead (as shipped)", "target ≤ 200 ms"),
                                      ("0", "Step runs its own forward (INSPECTOR_RUN_AHEAD=0)", "peer")):
            per_tab, engine = measured[run_ahead]
            rows.append((f"Step click-to-paint, all tabs (median), {what}: new token / all views",
                         medians([t for ts in per_tab.values() for t in ts]), note))
            rows.append((f"engine step in the app, {what} (forward + sample, median)", f"{engine:.0f} ms", ""))
        rows.append((f"engine step alone, {all_threads} torch threads (forward + sample, median)",
                     f"{engine_ms:.0f} ms", "peer"))
        rows.append((f"engine step alone, {app_threads} torch thread(s) as the app decodes",
                     f"{alone[app_threads]:.0f} ms", "peer"))

        # Play with views on: the heaviest tab (Attention) and a light one (Timing)
        for tab in ("Attention", "Timing"):
            page.get_by_role("tab", name=tab).click()
            page.locator("#prompt textarea").fill("Write a long story about a dragon who learns to bake bread.")
            page.locator("#prefill-btn").click()
            page.locator("#status-phase", has_text="prefill done").wait_for(timeout=120_000)
            page.wait_for_timeout(500)
            start = int(page.locator("#token-count").get_attribute("data-generated"))
            if not page.locator("#play-max input").is_checked():
                page.locator("#play-max input").check()  # Play as fast as the model goes (the Speed control's max)
            t0 = time.perf_counter()
            page.locator("#play-btn").click()
            page.wait_for_function(
                f"Number(document.querySelector('#token-count').dataset.generated) >= {start + args.play_tokens}"
                " || document.querySelector('#status-line').dataset.phase.startsWith('finished')",
                timeout=600_000, polling=20)
            elapsed = time.perf_counter() - t0
            got = int(page.locator("#token-count").get_attribute("data-generated")) - start
            page.evaluate("document.getElementById('pause-btn').click()")  # as the space shortcut does
            page.wait_for_function("!document.querySelector('#status-line').dataset.phase.includes('playing')",
                                   timeout=120_000)
            play_tps = got / elapsed
            rows.append((f"Play tokens/s with views on, {tab} tab open ({got} tokens)", f"{play_tps:.1f} tok/s",
                         f"{play_tps * engine_ms / 1000:.2f}× engine alone; target ≥ 6"))
        rows.append(("engine alone tokens/s", f"{1000 / engine_ms:.1f} tok/s", "peer"))
        browser.close()
        demo.close()
        cold = cold_start(p)
        rows.append(("Cold start (python app.py → page usable)", f"{cold:.1f} s", ""))

    print("| measurement | value | note |\n|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
