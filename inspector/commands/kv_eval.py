"""`inspector kv-eval --text-file F --policy POLICY [--budget B] [--sinks S] [--positions P] [--prefill N] [--json]`:
teacher-force a text through the model with a KV-cache policy active and compare it with the full cache
on the same tokens (`inspector.quant.kv_eval`).

POLICY: full, window, sinks (S sink tokens + a window), h2o, snapkv (eviction, `--budget B` positions kept
per layer and KV head), int8, int4 (a KIVI-quantized cache, every entry kept). `--positions original`
(default: evicted entries are masked, kept keys keep their positions, as H2O) or `contiguous` (the window
family only: the cache is compacted and kept keys re-rotated, as StreamingLLM). The first `--prefill N`
tokens (default: half the text) are one forward, as a prompt; every later token is one decode step.

`--json` prints one object: policy, budget, sinks, positions, tokens, prefill, scored (tokens predicted),
kl_mean, kl_p95 (KL(p_full || p_policy) in nats per predicted token), top1_agreement, ppl, ppl_full,
kv_bytes, kv_bytes_full (bytes of the entries each cache still reads at the end), seconds, seconds_full.
kv_bytes is what a cache holding only those entries would take: with `--positions original` the evicted
entries are masked and their storage stays allocated; int8 / int4 count packed codes with their scales while
the buffers hold dequantized fp32; only `--positions contiguous` compacts (its freed slots take new tokens).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from inspector.api.analyses import POSITIONS, PREFILL, kv_spec
from inspector.commands.flags import json_flags, model_flags
from inspector.errors import InputError
from inspector.generation.request import BUDGET, SINKS  # the policies' numbers, as a run takes them

POLICY_NAMES = ("full", "window", "sinks", "h2o", "snapkv", "int8", "int4")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("kv-eval", help="KL, top-1 and perplexity of a KV-cache policy against the full cache",
                              description=__doc__.split("\n\n")[0], parents=[model_flags(), json_flags()])
    p.add_argument("--text-file", required=True, metavar="F", help="a UTF-8 text file, teacher-forced")
    p.add_argument("--policy", required=True, metavar="POLICY", help=" | ".join(POLICY_NAMES))
    p.add_argument("--budget", type=BUDGET.argparse, default=None, metavar="B",
                   help=f"positions each layer (and KV head) keeps: {BUDGET.allowed} (snapkv: of the prompt; it "
                        "evicts nothing while decoding)")
    p.add_argument("--sinks", type=SINKS.argparse, default=4, metavar="S", help="sink tokens of `sinks` (default 4)")
    p.add_argument("--positions", choices=POSITIONS, default="original",
                   help="kept keys keep their positions (original, H2O) or are re-rotated (contiguous, StreamingLLM)")
    p.add_argument("--prefill", type=PREFILL.argparse, default=None, metavar="N",
                   help="tokens read in the first forward (default: half the text)")
    p.set_defaults(func=main)


def read_text(path: str) -> str:
    """The file's text; InputError for a missing, empty or non-UTF-8 file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read text file {path!r}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"text file {path!r} is not UTF-8 (byte {exc.start}): give a UTF-8 text file") from None
    if not text.strip():
        raise InputError(f"text file {path!r} is empty: give a file with text to teacher-force")
    return text


def main(args: argparse.Namespace) -> int:
    policy = dict(policy=args.policy, budget=args.budget, sinks=args.sinks, positions=args.positions)
    kv_spec(**policy, names="flags")  # unknown policy, missing budget, sinks >= budget: before the model loads
    text = read_text(args.text_file)

    from inspector.api.model import load

    model = load(args.model, device=args.device)
    result = model.kv_eval(text, **policy, prefill=args.prefill, names="flags")
    if args.json:
        print(json.dumps(result))
        return 0
    budget = "" if result["budget"] is None else f" budget {result['budget']}"
    print(f"{result['policy']}{budget} ({result['positions']} positions) over {result['scored']} of "
          f"{result['tokens']} tokens: KL mean {result['kl_mean']:.4f} p95 {result['kl_p95']:.4f} nats, "
          f"top-1 {result['top1_agreement']:.1%}, ppl {result['ppl']:.2f} (full {result['ppl_full']:.2f}), "
          f"KV {result['kv_bytes']:,} of {result['kv_bytes_full']:,} bytes{bytes_note(result)}, "
          f"{result['seconds']:.1f} s")
    return 0


def bytes_note(result: dict) -> str:
    """What the KV bytes are, when they are not the storage the cache holds (see the module doc)."""
    if result["policy"] == "full":
        return ""
    if result["policy"] in ("int8", "int4"):
        return " (as packed codes; the buffers hold fp32)"
    if result["positions"] == "contiguous":
        return " (compacted)"
    return " (in the entries still attended: evicted ones are masked, their storage kept)"
