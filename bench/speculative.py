"""Speculative decoding vs plain greedy decoding on the default model; prints a markdown table.

Run: python -m bench.speculative [--tokens 64] [--draft-len 5] [--layer 24] [--repeats 3] [--threads N]
     python -m bench.speculative --quick   (one prompt, a few tokens: a smoke test in seconds, not a measurement)

For each prompt (code and text whose continuation repeats the prompt, where prompt lookup shines, and free
text, where it does not), greedy: plain decoding (the engine's prefill + decode_step, argmax) and
`SpeculativeDecoder` with each drafter (`ngram` prompt lookup, `early-exit:L`). Tokens/s counts the tokens
after the prefill's and their wall time (the prefill is the same for all and is left out). Each method's
output is checked against plain decoding token for token. The machine may be shared, so methods take
turns, repeat after repeat, and each row shows the median; the speedup is the median tokens/s over plain
decoding's, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from inspector.engine.config import SamplingParams
from inspector.models.loader import load_model
from inspector.speculative.decoding import SpeculativeDecoder, plain_decode
from inspector.speculative.drafters import make_drafter

CODE = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
        "# the same functions again:\ndef add(a, b):")
LIST = ("Shopping list:\n- 2 apples\n- 1 loaf of bread\n- 3 bananas\n- 1 bottle of milk\n- 6 eggs\n\n"
        "The same shopping list again:\nShopping list:\n-")
# (name, text, chat template?, repeats its prompt?)
PROMPTS = [
    ("code (repeats)", CODE, False, True),
    ("list (repeats)", LIST, False, True),
    ("chat: gravity", "What is gravity?", True, False),
    ("chat: story", "Write a short story about a robot who learns to paint.", True, False),
]


def tokens_per_s(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.speculative", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model source (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per run")
    ap.add_argument("--draft-len", type=int, default=5)
    ap.add_argument("--layer", type=int, default=None, help="early-exit layer L (default: 80%% of the layers)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="one prompt, a few tokens: a smoke test")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    n_layers = loaded.config.num_hidden_layers
    layer = args.layer or max(1, round(0.8 * n_layers))
    prompts, tokens, repeats = (PROMPTS[:1], 8, 1) if args.quick else (PROMPTS, args.tokens, args.repeats)
    drafters = ["ngram", f"early-exit:{min(layer, n_layers - 1)}"]
    print(f"model {loaded.name}, {tokens} new tokens, k = {args.draft_len}, {repeats} repeats, "
          f"{torch.get_num_threads()} threads, greedy\n")
    print("| prompt | method | tok/s | acceptance | tokens per forward | draft share | speedup | same output |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, text, chat, _ in prompts:
        ids = loaded.tokenizer.encode(loaded.tokenizer.render_chat(text) if chat else text)
        rates: dict[str, list[float]] = {m: [] for m in ["plain", *drafters]}
        last: dict[str, SpeculativeDecoder] = {}
        plain_ids: list[int] = []
        for _ in range(repeats):  # methods take turns, so a burst of load elsewhere hits all of them
            plain_ids, timing = plain_decode(loaded.model, ids, tokens - 1)
            rates["plain"].append(timing.tokens_per_s)
            for spec in drafters:
                run = SpeculativeDecoder(loaded, make_drafter(spec, loaded.model), args.draft_len, SamplingParams(),
                                     max_new_tokens=tokens)
                run.prefill(ids)
                for _ in run.play():
                    pass
                rates[spec].append(run.stats.tokens_per_s)
                last[spec] = run
        plain = statistics.median(rates["plain"])
        print(f"| {name} | plain | {plain:.1f} | | 1.00 | | 1.00x | |")
        for spec in drafters:
            run, rate = last[spec], statistics.median(rates[spec])
            same = run.generated_ids == plain_ids[:len(run.generated_ids)]
            st = run.stats
            print(f"| {name} | {spec} | {rate:.1f} | {st.acceptance_rate:.0%} | {st.tokens_per_forward:.2f} | "
                  f"{st.draft_share:.0%} | {rate / plain:.2f}x | {'yes' if same else 'NO'} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
