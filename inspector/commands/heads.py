"""`inspector heads [--probe-len N --probes K --seed S] [--role ROLE --top-k K] [--json]`: what each attention
head does (`inspector.analysis.heads`), and what the model loses without the strongest heads of one role
(`inspector.analysis.heads_ablation`).

The probe: K sequences of N token ids drawn uniformly from the ordinary tokens (special / control tokens
excluded) with seed S, each repeated once (after a BOS when the tokenizer starts plain prompts with one).
Every head gets four scores, the attention mass it puts, averaged over the sequences: previous-token (i to
i-1, every position i >= 1), first-token (i to 0, i >= 1), duplicate-token (i in the repeat to i-N, the
same token's earlier copy) and induction (i in the repeat to i-N+1, the token after that copy). Then the
probe's loss on its first and on its repeated copy with no head off, with the top-K heads of ROLE off and
with K random other heads off (seed S).

`--json` prints {"heads": [{"layer", "head", "previous_token", "first_token", "duplicate_token",
"induction"}, ...], "probe": {"n", "sequences", "seed", "prefix_ids", "length", "vocab_size",
"excluded_ids", "seconds", "rows_per_forward"}, "ablation": {"role", "k", "random_seed", "seconds",
"rows": [{"label", "heads": [[layer, head], ...], "loss_first_copy", "loss_repeated_copy"}, ...]}};
losses are mean cross-entropies in nats over each copy's tokens 2..N. The command is
`inspector.load(...)`'s `head_ablation` (ROLE, K: refused before any forward) and `head_scores` (the same
probe's atlas, computed once: `inspector.api.analyses`).
"""

from __future__ import annotations

import argparse
import json

from inspector.analysis.head_findings import PROBE_LEN, PROBES, ROLE_NAMES, ROLES, TOP_K  # numpy only: no torch
from inspector.commands.flags import json_flags, model_flags
from inspector.validate import SEED

SHOWN = 5  # strongest heads listed per role


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("heads", help="every attention head's previous-token, first-token, duplicate and "
                              "induction scores; the loss without the top heads of a role",
                              description=__doc__.split("\n\n")[0], parents=[model_flags(), json_flags()])
    p.add_argument("--probe-len", type=PROBE_LEN.argparse, default=48, metavar="N",
                   help=f"random tokens per copy, {PROBE_LEN.allowed}; the probe (2N, plus a BOS where the "
                   "model's prompts start with one) must fit the context window (default 48)")
    p.add_argument("--probes", type=PROBES.argparse, default=8, metavar="K",
                   help=f"random sequences, {PROBES.allowed} (default 8)")
    p.add_argument("--seed", type=SEED.argparse, default=0, metavar="S",
                   help=f"{SEED.allowed}: draws the probe's tokens and the random heads (default 0)")
    p.add_argument("--role", choices=ROLES, default="induction", help="whose top heads are ablated (default induction)")
    p.add_argument("--top-k", type=TOP_K.argparse, default=5, metavar="K",
                   help="heads ablated, up to half the model's heads (the random set is drawn from the others; "
                   "default 5)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from inspector.api.model import load

    model = load(args.model, device=args.device)
    probe_args = dict(probe_len=args.probe_len, probes=args.probes, seed=args.seed, names="flags")
    result = model.head_ablation(role=args.role, top_k=args.top_k, **probe_args)  # --top-k refused before forwards
    atlas = model.head_scores(**probe_args)  # the atlas the ablation ranked its heads by (kept per model and probe)
    probe = atlas.probe
    if args.json:
        print(json.dumps({"heads": atlas.heads_json(),
                          "probe": {**probe.to_json(), "seconds": atlas.seconds, "rows_per_forward": atlas.batched_rows},
                          "ablation": result.to_json()}))
        return 0
    print(f"probe: {probe.count} sequences of {probe.n} random tokens, each repeated once (seed {probe.seed}, "
          f"{probe.length} tokens{' with BOS' if probe.prefix else ''}); scores in {atlas.seconds:.1f} s")
    print(f"{'layer':>5} {'head':>4} {'previous':>9} {'first':>7} {'duplicate':>9} {'induction':>9}")
    for row in atlas.heads_json():
        print(f"{row['layer']:>5} {row['head']:>4} " + " ".join(f"{row[r]:>{w}.3f}" for r, w in zip(ROLES, (9, 7, 9, 9))))
    for role in ROLES:
        top = ", ".join(f"{L}.{h} {v:.2f}" for L, h, v in atlas.top(role, SHOWN))
        print(f"strongest {ROLE_NAMES[role]}: {top}")
    print(f"loss in nats on the probe's first copy / repeated copy ({result.seconds:.1f} s):")
    for r in result.rows:
        heads_text = f" ({', '.join(f'{L}.{h}' for L, h in r.heads)})" if r.heads else ""
        print(f"  {r.label + ' off' if r.heads else 'no head off'}{heads_text}: {r.loss_first:.3f} / {r.loss_repeat:.3f}")
    return 0
