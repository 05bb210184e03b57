"""Screenshots of the real app for the README: `python -m docs.screenshots` refreshes docs/img/*.png.

It starts the app in process on the embedded default model (127.0.0.1, a free port), drives Debian
chromium with Playwright at 1400x900 the way a visitor does (a prompt, Prefill, a few Steps) and saves
the first screen, each view and the guided tour (open at the KV cache step). Nothing is drawn by hand: every picture is the page as served.

Options: --out DIR (default docs/img), --steps N decode steps before the shots (default 6), --chromium PATH.
Also prints, for the layout checks, how far down the page the tokens and the open view's plot end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = "Why is the sky blue?"
SPECULATIVE_PROMPT = "Copy this list exactly, one per line: apples, pears, plums, cherries, apricots, peaches, figs."
VIEWS = [  # (tab label, file name, the element the shot waits for)
    ("Residual stream", "view_residual.png", "#resid-heatmap img"),
    ("Attention", "view_attention.png", "#attn-pattern .js-plotly-plot"),
    ("KV cache", "view_kv_cache.png", "#kv-growth .js-plotly-plot"),
    ("Sampling", "view_sampling.png", "#sampling-bars .js-plotly-plot"),
    ("Tensor inventory", "view_inventory.png", "#inventory table"),
    ("Timing", "view_timing.png", "#timing-chart .js-plotly-plot"),
]
LABS = [  # (tab label, its panel, file name, [(button pressed, then the element and text waited for), ...])
    ("Speculative", "#tab-speculative", "lab_speculative.png",
     [("#speculative-start", ("#speculative-status", "prefill done")),
      ("#speculative-play", ("#spec-stats[data-speedup]", None))]),
    ("Quantization", "#tab-quant", "lab_quantization.png",
     [("#quant-run", ("#quant-status", "compared with fp32")), ("#quant-hist-btn", ("#quant-status", "error max"))]),
    ("Serving", "#tab-serving", "lab_serving.png",
     [("#serving-load", ("#serving-status", "queued")), ("#serving-play", ("#serving-status", "all done"))]),
    ("Training", "#tab-training", "lab_training.png",
     [("#training-use-run", ("#training-text textarea", None)),
      ("#training-run", ("#training-status", "tokens teacher-forced"))]),
]
T = 300_000  # ms


def open_tab(page, label: str) -> None:
    """Open a view or lab tab by its label, opening its group (Views or Labs) first (static/app.js)."""
    if not page.evaluate("(label) => window.inspectorOpenTab(label)", label):
        sys.exit(f"error: the page has no tab named {label!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m docs.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM_PATH") or shutil.which("chromium"))
    args = ap.parse_args(argv)
    if not args.chromium:
        sys.exit("error: chromium not found (apt-get install chromium, or --chromium PATH)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from playwright.sync_api import expect, sync_playwright

    from inspector.models.loader import load_model
    from tests.support.ui_server import TOUR_SEEN_JS, start_app  # the browser tests' way of serving the app in process

    demo = start_app(load_model(None))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(TOUR_SEEN_JS)  # the tour is shot on its own (tour.png), not over every view
            page.goto(demo.local_url, timeout=T)
            expect(page.locator("#status-line")).to_be_visible(timeout=T)
            page.locator("#prompt textarea").fill(PROMPT)
            page.locator("#prefill-btn").click()
            expect(page.locator("#status-phase")).to_have_text("prefill done", timeout=T)
            for k in range(1, args.steps + 1):
                page.locator("#step-btn").click()
                expect(page.locator("#status-phase")).to_contain_text(f"decode step {k} ", timeout=T)
            page.evaluate("window.scrollTo(0, 0)")
            page.wait_for_timeout(800)
            page.screenshot(path=str(out / "first_screen.png"))
            print(f"{'element':<28} bottom (px, viewport 900)")
            for sel in ("#token-chips", "#resid-heatmap", "#pipeline-strip"):
                box = page.locator(sel).first.bounding_box() if page.locator(sel).count() else None
                print(f"{sel:<28} {'-' if box is None else round(box['y'] + box['height'])}")
            for label, name, ready in VIEWS:
                open_tab(page, label)
                expect(page.locator(ready).first).to_be_visible(timeout=T)
                page.wait_for_timeout(600)
                page.screenshot(path=str(out / name), full_page=False)
            # the guided tour, opened at the KV cache step by that view's "?"
            open_tab(page, "KV cache")
            page.locator("#tab-kv .ii-tour-help").click()
            expect(page.locator("#tour-kv-bytes")).to_be_visible(timeout=T)
            page.evaluate("window.scrollTo(0, 0)")
            page.wait_for_timeout(600)
            page.screenshot(path=str(out / "tour.png"))
            page.locator("#tour-close").click()
            # prompt lookup drafts from the context: a prompt whose answer repeats it shows accepted drafts
            page.locator("#prompt textarea").fill(SPECULATIVE_PROMPT)
            for label, panel, name, presses in LABS:
                open_tab(page, label)
                for button, (ready, text) in presses:
                    page.locator(button).click()
                    if text is None:
                        expect(page.locator(ready)).to_be_visible(timeout=T)
                    else:
                        expect(page.locator(ready)).to_contain_text(text, timeout=T)
                page.wait_for_timeout(1000)
                page.locator(panel).screenshot(path=str(out / name))  # the tab's panel, however tall
            browser.close()
    finally:
        demo.close()
    print(f"wrote {2 + len(VIEWS) + len(LABS)} screenshots to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
