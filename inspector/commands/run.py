"""`inspector run --prompt TEXT [...]`: generate from the terminal, streaming text as it comes.

`--json` prints one object instead, a stable contract for scripts: model, prompt_ids, prompt_pieces,
generated_ids, text, finished, steps (one per sampled token: step, chosen_id, chosen_piece, top = the
top-20 `{id, piece, logit, prob}` by raw logit, resid_norms = per layer L2 norm of the residual stream
after the layer at the newest position, kv_bytes = per layer KV cache bytes after the forward) and
timings (ttft_ms, tpot_ms list, tokenize_ms, prefill_ms).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from inspector.engine.config import SamplingParams
from inspector.errors import InputError

DTYPES = ("fp32", "bf16")
TOP_N = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="generate text and (with --json) show what happened at each step",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--system", default=None, help="system prompt (with --chat; default: the template's)")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="in (0, 1]; 1 = off")
    p.add_argument("--min-p", type=float, default=0.0, metavar="P", help="in [0, 1); 0 = off")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--model", default=None, metavar="SOURCE",
                   help="HF-format directory, .gguf file or Hub repo id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32")
    p.add_argument("--no-cache", action="store_true", help="recompute the full sequence at every step (slow)")
    p.add_argument("--json", action="store_true", help="print one JSON object with per-step details")
    p.set_defaults(func=run)


def params_from(args: argparse.Namespace) -> SamplingParams:
    """Validated sampling parameters (InputError with a one-line message when out of range)."""
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            min_p=args.min_p, seed=args.seed)
    try:
        params.validate()
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return params


def result_dict(session: Any) -> dict[str, Any]:
    """The `--json` object of a finished session."""
    steps = []
    for rec in session.records:
        s = rec.sample
        steps.append({
            "step": rec.step,
            "chosen_id": s.token_id,
            "chosen_piece": s.token_piece,
            "top": [{"id": c.id, "piece": c.piece, "logit": c.logit, "prob": c.prob_raw}
                    for c in s.candidates[:TOP_N]],
            "resid_norms": [float(x) for x in rec.resid_post[:, -1]],
            "kv_bytes": [kv.nbytes for kv in rec.kv],
            "forward_ms": rec.forward_ms,
            "sample_ms": rec.sample_ms,
        })
    first = session.records[0]
    return {
        "model": session.loaded.name,
        "prompt_ids": session.prompt_ids,
        "prompt_pieces": session.tokenizer.pieces(session.prompt_ids),
        "generated_ids": session.generated_ids,
        "text": session.text,
        "finished": session.finished,
        "steps": steps,
        "timings": {"ttft_ms": session.ttft_ms, "tpot_ms": session.tpot_ms,
                    "tokenize_ms": first.tokenize_ms, "prefill_ms": first.forward_ms},
    }


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise InputError("prompt is empty")
    if args.max_new_tokens <= 0:
        raise InputError(f"--max-new-tokens must be > 0, got {args.max_new_tokens}")
    params = params_from(args)

    import torch

    from inspector.models.loader import load_model
    from inspector.session.session import Session

    loaded = load_model(args.model, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32)
    session = Session(loaded, recompute=args.no_cache, record=args.json)
    session.prefill(args.prompt, params, chat=args.chat, system=args.system, max_new_tokens=args.max_new_tokens)
    shown = 0
    if not args.json:
        shown = _stream(session.text, shown)
    for _ in session.play(params):
        if not args.json:
            shown = _stream(session.text, shown)
    if args.json:
        print(json.dumps(result_dict(session), ensure_ascii=False))
        return 0
    print(flush=True)
    tpot = session.tpot_ms
    per_tok = f", {1000 * len(tpot) / sum(tpot):.1f} tok/s" if tpot and sum(tpot) > 0 else ""
    print(f"[{len(session.generated_ids)} tokens, finished: {session.finished}, "
          f"time to first token {session.ttft_ms:.0f} ms{per_tok}]", file=sys.stderr)
    return 0


def _stream(text: str, shown: int) -> int:
    """Print the part of `text` not printed yet; return the new printed length."""
    if len(text) > shown:
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
    return len(text)
