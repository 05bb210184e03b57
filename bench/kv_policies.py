"""KV-cache policies on the default model, teacher-forced on one English text: KL, top-1 agreement,
perplexity and bytes kept against the full cache, per policy and budget (the way the H2O, StreamingLLM and
SnapKV papers compare them), with the full cache's run as the peer in the same process.

Run: python -m bench.kv_policies [--text-file F] [--tokens 1024] [--budgets 64,128,256,512]
     [--policies window,sinks,h2o,snapkv,int8,int4] [--sinks 4] [--positions original|contiguous]
     [--threads N] [--plot FILE.html] [--model SOURCE]
     python -m bench.kv_policies --quick   (96 tokens, budgets 32,64: a smoke test, not a measurement)

The text's first --tokens tokens (default text: this repository's README.md) are read as a prompt of half
of them (one forward) and the rest one decode step each (`inspector.quant.kv_eval`). Table: policy, budget,
KL mean and p95 (nats per predicted token), top-1 agreement, perplexity (full cache's in the header), KV
bytes kept at the end and the ratio to the full cache's, seconds and the ratio to the full cache's run.
`--plot` writes KL against bytes kept as an HTML figure (`inspector.viz.kv_policies`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from inspector.models.loader import load_model
from inspector.quant.kv_eval import CacheSpec, QUANT_POLICIES, evaluate
from inspector.units import format_bytes

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text-file", default=str(README))
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--budgets", default="64,128,256,512")
    ap.add_argument("--policies", default="window,sinks,h2o,snapkv,int8,int4")
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--positions", choices=("original", "contiguous"), default="original")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--plot", default=None, metavar="FILE.html")
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.budgets = 96, "32,64"
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    ids = loaded.tokenizer.prompt_ids(Path(args.text_file).read_text(encoding="utf-8"), False)[:args.tokens]
    prefill = len(ids) // 2
    budgets = [int(b) for b in args.budgets.split(",")]
    rows, ref = [], None
    full, ref = evaluate(loaded.model, ids, CacheSpec("full"), prefill)
    rows.append(full)
    print(f"{loaded.name}, {len(ids)} tokens of {Path(args.text_file).name} (prefill {prefill}, "
          f"{full['scored']} predicted), {torch.get_num_threads()} threads, positions {args.positions}; "
          f"full cache: ppl {full['ppl_full']:.2f}, {format_bytes(full['kv_bytes_full'])}, {full['seconds_full']:.1f} s\n")
    print("KV kept: the kept entries' bytes, what a compacting cache would hold (masked-out entries stay in "
          "memory unless the policy compacts: --positions contiguous for window/sinks)\n")
    print("| policy | budget | KL mean | KL p95 | top-1 | ppl | KV kept | vs full | seconds | vs full |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        rerotate = args.positions == "contiguous" and policy in ("window", "sinks")
        for budget in ([None] if policy in QUANT_POLICIES else budgets):
            r, ref = evaluate(loaded.model, ids, CacheSpec(policy, budget, args.sinks, rerotate), prefill, ref)
            rows.append(r)
            print(f"| {policy} | {budget or '-'} | {r['kl_mean']:.4f} | {r['kl_p95']:.4f} | "
                  f"{r['top1_agreement']:.1%} | {r['ppl']:.2f} | {format_bytes(r['kv_bytes'])} | "
                  f"{r['kv_bytes'] / r['kv_bytes_full']:.2f}x | {r['seconds']:.1f} | "
                  f"{r['seconds'] / r['seconds_full']:.2f}x |", flush=True)
    if args.plot:
        from inspector.viz.kv_policies import kl_bytes_figure

        kl_bytes_figure(rows).write_html(args.plot, include_plotlyjs=True)
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
