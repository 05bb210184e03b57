"""The load bench's visitors, with the labs: prefill + Steps on the page, then every lab of the page.

`run_parallel_with_labs(url, mode, prompts, steps, warmup, labs)` is `harness.server_proc.run_parallel` (one
client and thread per prompt, a barrier, then each visitor's prefill and Steps) where each visitor, once
its Steps are done, also opens every lab in the same browser session (the same client, so the same session
id), as a visitor clicking through the tabs would: Speculative Start (early-exit drafter at `LAB_LAYER`,
draft length `LAB_DRAFT_LEN`: a second KV cache) and one Round; Serving Load and one Step (a block pool);
Quantization Run at `LAB_SCHEME` (the shared model, built once); KV policies Run; Interventions Apply on the
page's run (a branch) and Attribute; Training Run (its step's memory reserved while it runs); Models Compare
with the page's own model as the second one (no second model is loaded); the Beams view's Run. It returns
the runs, every lab request (`LabCall`: name, latency, error) and the wall seconds from the barrier to the
last visitor's last Step (the labs excluded).

The lab events are not named API endpoints; `lab_endpoints(client)` finds each one's index in the app's
config as the click event of the button with the tab's elem_id (`LAB_BUTTONS`). A lab's error is its status
line's message (`class="ii-error"`), or the transport error.
"""

from __future__ import annotations

import html
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from inspector.models.catalog import DEFAULT_KEY
from harness.server_proc import (CALL_TIMEOUT_S, GREEDY, SESSION_KINDS, SessionRun, open_session, run_at_barrier,
                                 run_session)

LAB_BUTTONS = ("speculative-start", "speculative-round", "serving-load", "serving-step", "quant-run", "kvpolicy-run",
               "iv-apply", "iv-attribute", "training-run", "models-compare", "beams-run")
LAB_LAYER = 24  # early-exit layer for SmolLM2-135M's 30 (the tab's default, 0.8 x layers), capped by the slider
LAB_DRAFT_LEN = 3
LAB_SCHEME = "int8"
LAB_SECOND_MODEL = DEFAULT_KEY  # the Models lab's second model: the page's own (the default), so none is loaded
BEAM_DECODING = ("1", "0", "0", "0", "", "", "0", "", "none", "", "2", "1")  # the settings panel: 2 beams
_ERROR = re.compile(r'class="ii-error"[^>]*>(.*?)</div>', re.S)


@dataclass
class LabCall:
    name: str  # the button's elem_id
    ms: float
    error: str | None = None


def lab_endpoints(client: Any) -> dict[str, int]:
    """elem_id of each lab button -> the index of its click event (KeyError naming a button the app lacks)."""
    config = client.config
    elem = {c["id"]: (c.get("props") or {}).get("elem_id") for c in config["components"]}
    found = {}
    for index, dep in enumerate(config["dependencies"]):
        for target, event in dep.get("targets", []):
            if event == "click" and elem.get(target) in LAB_BUTTONS:
                found[elem[target]] = dep.get("id", index)
    missing = [b for b in LAB_BUTTONS if b not in found]
    if missing:
        raise KeyError(f"the app has no click event for {', '.join(missing)}")
    return found


def _call(client: Any, endpoints: dict[str, int], name: str, *args: Any) -> LabCall:
    t0 = time.perf_counter()
    try:
        out = client.submit(*args, fn_index=endpoints[name]).result(timeout=CALL_TIMEOUT_S)
        status = out[0] if isinstance(out, (list, tuple)) else out
        m = _ERROR.search(str(status))
        error = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))) if m else None
    except Exception as exc:  # noqa: BLE001 - a transport error (server gone, timeout) is the lab's error
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return LabCall(name, (time.perf_counter() - t0) * 1e3, error)


def open_labs(client: Any, prompt: str, max_new: int) -> list[LabCall]:
    """Speculative Start + one Round, then Quantization Run, in this client's browser session."""
    try:
        endpoints = lab_endpoints(client)
    except KeyError as exc:
        return [LabCall("labs", 0.0, str(exc))]
    slider = [c for c in client.config["components"] if (c.get("props") or {}).get("elem_id") == "speculative-layer"]
    top = slider[0]["props"].get("maximum") if slider else None  # the served model's last allowed layer
    layer = LAB_LAYER if top is None else min(LAB_LAYER, int(top))
    calls = [_call(client, endpoints, "speculative-start", "early-exit", layer, LAB_DRAFT_LEN, prompt, True, "",
                   max_new, *GREEDY)]
    if not calls[0].error:
        calls.append(_call(client, endpoints, "speculative-round"))
    calls.append(_call(client, endpoints, "serving-load", f"0 | {max_new} | {prompt}\n1 | {max_new} | {prompt}", 2,
                       16, 0, 1, True, "", max_new, *GREEDY, False, 0))
    if not calls[-1].error:
        calls.append(_call(client, endpoints, "serving-step"))
    calls.append(_call(client, endpoints, "quant-run", LAB_SCHEME, "fp32", prompt, True, "", max_new))
    calls.append(_call(client, endpoints, "kvpolicy-run", "h2o", 16, 4, 0, 0, prompt, True, "", max_new,
                       "stop (context full)"))
    calls.append(_call(client, endpoints, "iv-apply", "head output (attn.hook_z)", "zero", "0", "0", "0.5", "1",
                       "0", "love", "hate", "4"))
    calls.append(_call(client, endpoints, "iv-attribute", "-1"))
    calls.append(_call(client, endpoints, "training-run", prompt, prompt))
    calls.append(_call(client, endpoints, "models-compare", LAB_SECOND_MODEL, prompt, True, ""))
    calls.append(_call(client, endpoints, "beams-run", prompt, True, "", max_new, *BEAM_DECODING))
    return calls


def _visitor(kind: Any, url: str, prompt: str, steps: int, start: threading.Barrier, warmup: bool,
             labs: bool) -> tuple[SessionRun, list[LabCall], float]:
    """One visitor: (its page run, its lab requests, when its Steps ended: perf_counter)."""
    try:
        session = open_session(kind, url, prompt, warmup)
    except Exception as exc:  # noqa: BLE001 - could not even connect
        start.wait()
        return SessionRun(prompt, error=f"{type(exc).__name__}: {exc}"), [], time.perf_counter()
    try:
        run = run_session(session, prompt, steps, None, start)
        ended = time.perf_counter()
        calls = open_labs(session.client, prompt, steps + 1) if labs and not run.error else []
        return run, calls, ended
    finally:
        session.close()


def run_parallel_with_labs(url: str, mode: str, prompts: list[str], steps: int, warmup: bool = False,
                           labs: bool = True) -> tuple[list[SessionRun], list[LabCall], float]:
    """Every visitor at once (see the module doc); `warmup`: the first one prefills and steps once before the
    barrier, untimed."""
    kind = SESSION_KINDS[mode]
    results: list = [None] * len(prompts)
    start = threading.Barrier(len(prompts) + 1, timeout=CALL_TIMEOUT_S)

    def worker(i: int) -> None:
        try:
            results[i] = _visitor(kind, url, prompts[i], steps, start, warmup and i == 0, labs)
        except threading.BrokenBarrierError:  # another client did not connect within CALL_TIMEOUT_S
            results[i] = (SessionRun(prompts[i], error="gave up waiting for the other sessions to connect"), [],
                          time.perf_counter())

    t0 = run_at_barrier(worker, len(prompts), start)
    runs = [r for r, _, _ in results]
    calls = [c for _, cs, _ in results for c in cs]
    return runs, calls, max(end for _, _, end in results) - t0
