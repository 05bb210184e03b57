"""`inspector run --prompt TEXT [...]`: generate from the terminal, streaming text as it comes.

`--json` prints one object instead, a stable contract for scripts: model, prompt_ids, prompt_pieces,
generated_ids, text, finished, steps (one per sampled token: step, chosen_id, chosen_piece, top = the
top-20 `{id, piece, logit, prob}` by raw logit, prob being the softmax of the raw logits (before any
penalty, temperature or filter), resid_norms = per layer L2 norm of the residual stream after the layer
(before the final norm) at the newest position, kv_bytes = per layer bytes of the KV cache entries in use
after the forward (not the allocated storage), routing = per layer the expert ids the newest position went
to, highest weight first, in a mixture-of-experts model, null in a dense one, forward_ms = the forward's wall
time with the recorder on, sample_ms = the draw's) and timings (ttft_ms = tokenize + prefill forward + first
draw, tpot_ms = per decode step its forward + draw, tokenize_ms, prefill_ms = the prefill's forward). Each step
also names its seed and `stages`: every stage of the processor chain in the order it ran (penalties, bans,
grammar, then
temperature, top-k, top-p, min-p), each with allowed, removed and moved token counts, mass_removed and the
top tokens before and after it.
`request` is the run's description, every flag's value (`inspector.generation.request.RunRequest.to_json()`,
with its "version"). `interventions` lists the label of each intervention the run applied, in order ([]
without any): `--ablate-head L.H` and `--ablate-mlp L` (repeatable), `--scale-head L.H=F`, `--steer L
--steer-towards TEXT --steer-away TEXT [--steer-alpha A]` (`RunRequest.lever_spec`), applied in the prefill and
every step (and with `--no-cache`).
Decoding flags (`--repetition-penalty`, `--no-repeat-ngram-size`, `--stop`, `--json-schema`, ...: `inspector
run --help`) add those stages; `--num-beams B` runs beam search instead (`inspector.commands.decoding`).

`--quant int8|int4[:GROUP]|bf16` and `--kv-quant int8` generate with quantized weights and/or an int8 KV cache
(`inspector.quant`). `--save-trace FILE` also writes the run as a trace
file (`inspector.session.trace_file`): `inspector trace FILE --json` prints that same object again.

`--attention tiled` runs FlashAttention's tiled path (`inspector.engine.flash`) instead of the standard one.

`--on-context-full stop|window`: when prompt + output fill the model's context window, stop with finish
reason "context_full" (default), or go on with a sliding window over the KV cache
(`inspector.session.session`: 4 sink tokens and the newest positions, each kept at its original position,
so positions count on past `max_position_embeddings`: RoPE angles the model never saw in training).

`--speculative ngram|early-exit:L --draft-len K` decodes speculatively (`inspector.speculative`): a drafter
proposes up to K tokens, the full model verifies them in one forward. The JSON then gains `speculative`:
drafter, draft_len, rounds, drafted, accepted, target_forwards, tokens_per_forward, acceptance_rate and
per_round (drafted ids, accepted count, correction: the corrected or bonus token, kind); its steps carry
step, chosen_id, chosen_piece, top and round (no recorder runs: no resid_norms, kv_bytes or per-step
forward times), and tpot_ms splits each round's time evenly over the tokens it produced. Its `request`, and
`--num-beams`'s, is the run's description as in a plain run's JSON.

The command parses its flags into a `RunRequest`, checks it (refusals naming the flags) before any model
loads, then runs it through the Python API: `inspector.load`, then `Model.start(request)` (a plain or a
speculative run) or `Model.beam_search` (`--num-beams`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inspector.commands.decoding import run_beam, stage_effects
from inspector.commands.flags import (chat_flags, decoding_flags, intervention_flags, json_flags, json_text,
                                      max_new_tokens_flags, model_flags, prompt_flags, sampling_flags)
from inspector.generation.request import (ATTENTIONS, CONTEXT_FULL, DEFAULT_DRAFT_LEN, DRAFT_LEN, DTYPES,
                                          RunRequest)

TOP_N = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="generate text and (with --json) show what happened at each step",
                              description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              parents=[prompt_flags(), chat_flags(), max_new_tokens_flags(64), sampling_flags(),
                                       decoding_flags(), model_flags(), json_flags(), intervention_flags(),
                                       run_flags()])
    p.set_defaults(func=main)


def run_flags() -> argparse.ArgumentParser:
    """The flags only `inspector run` takes (the Python API takes them as keyword arguments too)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="the weights' dtype (default fp32)")
    p.add_argument("--no-cache", action="store_true", help="recompute the full sequence at every step (slow)")
    p.add_argument("--quant", default=None, metavar="SCHEME", help="hold the weights as int8 | int4[:GROUP] | bf16")
    p.add_argument("--kv-quant", default=None, metavar="KV", help="KV cache precision: fp32 (default) | int8")
    p.add_argument("--attention", choices=ATTENTIONS, default="standard",
                   help="the attention path: standard (full score rows) or tiled (FlashAttention's online softmax "
                        "over tiles of keys; the same result up to float rounding)")
    p.add_argument("--on-context-full", choices=CONTEXT_FULL, default="stop",
                   help="when prompt + output fill the context window: stop (finish reason context_full, the "
                        "default) or go on with a sliding window over the KV cache (4 sink tokens + the newest, each "
                        "at its original position: positions count on past the model's max_position_embeddings)")
    p.add_argument("--save-trace", metavar="FILE", default=None,
                   help="save the run as a trace file (reopen it with `inspector trace FILE` or in the app)")
    p.add_argument("--speculative", default=None, metavar="DRAFTER",
                   help="speculative decoding with this drafter: ngram (prompt lookup) or early-exit:L "
                        "(the first L layers); greedy gives plain greedy's tokens (up to float rounding), "
                        "sampling the full model's distribution (not the same draws as a plain run's seed)")
    p.add_argument("--draft-len", type=DRAFT_LEN.argparse, default=None, metavar="K",
                   help=f"tokens drafted per round with --speculative, {DRAFT_LEN.allowed} "
                        f"(default {DEFAULT_DRAFT_LEN})")
    return p


def request_from(args: argparse.Namespace) -> RunRequest:
    """The run `inspector run`'s flags describe, --json-schema's file read (unchecked: `RunRequest.check`)."""
    return RunRequest.from_flags(vars(args))


def result_dict(session: Any) -> dict[str, Any]:
    """The `--json` object of a finished session, with its description ("request": `RunRequest.to_json()`)
    when the session has one (`session.request`)."""
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
            "routing": rec.routing.expert_ids[:, -1].tolist() if rec.routing is not None else None,
            "forward_ms": rec.forward_ms,
            "sample_ms": rec.sample_ms,
            "seed": s.params.seed,
            "stages": stage_effects(s),
        })
    first = session.records[0]
    out = {
        "model": session.loaded.name,
        "prompt_ids": session.prompt_ids,
        "prompt_pieces": session.tokenizer.pieces(session.prompt_ids),
        "generated_ids": session.generated_ids,
        "text": session.text,
        "finished": session.finished,
        "steps": steps,
        "interventions": [iv.label or iv.point for iv in getattr(getattr(session, "levers", None), "interventions", ())],
        "timings": {"ttft_ms": session.ttft_ms, "tpot_ms": session.tpot_ms,
                    "tokenize_ms": first.tokenize_ms, "prefill_ms": first.forward_ms},
    }
    if getattr(session, "request", None) is not None:
        out["request"] = session.request
    return out


def main(args: argparse.Namespace) -> int:
    """`inspector run`: the flags' `RunRequest`, run through the Python API (`inspector.load`, `Model.start`,
    `Run.play`, `Run.save`; `Model.beam_search` with --num-beams)."""
    request = request_from(args)
    _, settings = request.check(save_trace=args.save_trace is not None)  # before any model loads

    from inspector.api.model import load

    model = load(args.model, dtype=args.dtype, device=args.device, attention=args.attention)
    if settings.num_beams > 1:
        return run_beam(args, model, request)
    run = model.start(request, record=args.json or args.save_trace is not None, names="flags")
    if request.speculative is not None:
        return _print_speculative(args, run)
    shown = 0 if args.json else _stream(run.text, 0)
    for _ in run.play():
        if not args.json:
            shown = _stream(run.text, shown)
    if args.save_trace is not None:
        run.save(args.save_trace)
    session = run.session
    if args.json:
        print(json_text(result_dict(session)))
        return 0
    print(flush=True)
    tpot = session.tpot_ms
    per_tok = (f", {1000 * len(tpot) / sum(tpot):.1f} tok/s over the decode steps (forward + draw)"
               if tpot and sum(tpot) > 0 else "")
    print(f"[{len(session.generated_ids)} tokens, finished: {session.finished}, "
          f"time to first token {session.ttft_ms:.0f} ms (tokenize + prefill + first draw){per_tok}]", file=sys.stderr)
    return 0


def _print_speculative(args: argparse.Namespace, run: Any) -> int:
    """`run --speculative`: rounds of draft + one verify forward, streamed per round (or one JSON object)."""
    shown = 0 if args.json else _stream(run.text, 0)
    for _ in run.play():
        if not args.json:
            shown = _stream(run.text, shown)
    if args.json:
        print(json_text(run.to_json()))  # with its "request"
        return 0
    print(flush=True)
    st = run.stats
    print(f"[{len(run.generated_ids)} tokens, finished: {run.finished}, {st.drafter} k={st.draft_len}: "
          f"{st.rounds} rounds, acceptance {st.acceptance_rate:.0%}, {st.tokens_per_forward:.2f} tokens per "
          f"full-model forward, {st.tokens_per_s:.1f} tok/s after the prefill]", file=sys.stderr)
    return 0


def _stream(text: str, shown: int) -> int:
    """Print the part of `text` not printed yet; return the new printed length."""
    if len(text) > shown:
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
    return len(text)
