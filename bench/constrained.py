"""Constrained decoding on the default model: mask cost against the step time, outputs that parse and match,
and the grammar libraries side by side; prints markdown tables.

Run: python -m bench.constrained [--samples 20] [--threads N] [--quick]

1. Mask cost: seeded sampled runs under a JSON Schema with nested objects, arrays, enums and numbers;
   per token, the time of the grammar stage (the llguidance mask and applying it) against the time of the
   whole decode step (forward + every stage + the draw), medians and p95, and their ratio. Goal: <= 1 ms.
2. Validity: `--samples` seeded outputs at temperature 1 for that schema, each parsed and validated with
   `jsonschema`; regexes (a US phone number, an ISO date) matched in full by Python's `re`.
3. Libraries: llguidance (the one used), and xgrammar / outlines-core when importable, replaying the same
   valid token sequence: set-up time, next-token mask time per token (median, max) and installed size.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from importlib import metadata
from pathlib import Path

import torch

from inspector.engine.config import SamplingParams
from inspector.generation.settings import DecodingSettings
from inspector.models.loader import load_model
from inspector.session.session import Session

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "height_m": {"type": "number"},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "height_m", "role", "address", "tags"],
    "additionalProperties": False,
}
REGEXES = {"US phone": r"\(\d{3}\) \d{3}-\d{4}", "ISO date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"}
PROMPT = "Make up a user profile as JSON."


class Timed:
    """A processor wrapper that records how long each call of the wrapped one took."""

    def __init__(self, proc) -> None:
        self.proc, self.name, self.ms = proc, proc.name, []

    def __call__(self, ids, logits):
        t0 = time.perf_counter()
        out = self.proc(ids, logits)
        self.ms.append((time.perf_counter() - t0) * 1e3)
        return out


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def constrained_run(loaded, settings: DecodingSettings, prompt: str, seed: int, max_new: int):
    """(session, grammar-stage ms per token, step ms per token) of one seeded run at temperature 1."""
    s = Session(loaded, record=False)
    s.set_decoding(settings)
    params = SamplingParams(temperature=1.0, seed=seed)
    s.prefill(prompt, params, chat=True, max_new_tokens=max_new)
    timed = Timed(s._decoding_procs[-1])
    s._decoding_procs = s._decoding_procs[:-1] + (timed,)
    step_ms = []
    while not s.finished:
        t0 = time.perf_counter()
        s.step(params)
        step_ms.append((time.perf_counter() - t0) * 1e3)
    return s, timed.ms[1:], step_ms  # the first mask belongs to the prefill's draw


def library_rows(loaded, ids: list[int]) -> list[tuple]:
    """Replay `ids` (valid under SCHEMA) through each importable library: set-up s, mask ms median / max, MB."""
    rows = []
    vocab, eos = loaded.config.vocab_size, sorted(loaded.stop_ids)
    schema = json.dumps(SCHEMA)

    def size(dist: str) -> float:
        try:
            return sum(f.locate().stat().st_size for f in metadata.files(dist) or [] if f.locate().exists()) / 1e6
        except metadata.PackageNotFoundError:
            return float("nan")

    try:
        import llguidance
        import numpy as np

        t0 = time.perf_counter()
        tok = llguidance.LLTokenizer(loaded.tokenizer.to_json(), n_vocab=vocab, eos_token=eos)
        m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema(schema), log_level=0)
        setup = time.perf_counter() - t0
        ms = []
        for t in ids:
            t0 = time.perf_counter()
            np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")
            ms.append((time.perf_counter() - t0) * 1e3)
            m.consume_token(t)
        rows.append(("llguidance", metadata.version("llguidance"), setup, statistics.median(ms), max(ms),
                     size("llguidance"), "no torch needed; the tokenizer from tokenizer.json"))
    except ImportError:
        pass
    try:
        import transformers
        import xgrammar as xgr

        hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(Path(loaded.weights_path) / "tokenizer.json"))
        t0 = time.perf_counter()
        info = xgr.TokenizerInfo.from_huggingface(hf_tok, vocab_size=vocab, stop_token_ids=eos)
        matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema(schema))
        setup = time.perf_counter() - t0
        mask = xgr.allocate_token_bitmask(1, vocab)
        ms = []
        for t in ids:
            t0 = time.perf_counter()
            matcher.fill_next_token_bitmask(mask)
            ms.append((time.perf_counter() - t0) * 1e3)
            matcher.accept_token(t)
        rows.append(("xgrammar", "", setup, statistics.median(ms), max(ms),
                     size("xgrammar") + size("apache-tvm-ffi"), "depends on torch and apache-tvm-ffi; "
                     "its tokenizer info needs a transformers tokenizer"))
    except ImportError:
        pass
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.constrained", description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20, help="seeded schema outputs to validate")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="two samples, one regex run each: a smoke test")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import jsonschema

    loaded = load_model()
    samples = 2 if args.quick else args.samples
    settings = DecodingSettings(json_schema=json.dumps(SCHEMA))
    mask_ms, step_ms, valid, lengths, first_ok = [], [], 0, [], None
    for seed in range(samples):
        s, m, st = constrained_run(loaded, settings, PROMPT, seed, 160)
        mask_ms += m
        step_ms += st
        lengths.append(len(s.generated_ids))
        try:
            jsonschema.validate(json.loads(s.text), SCHEMA)
            valid += 1
            first_ok = first_ok or s.generated_ids[:-1]
        except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
            print(f"seed {seed}: invalid ({s.finished}): {str(exc)[:80]} — {s.text[:80]!r}")
    print(f"## Constrained decoding on {loaded.name} ({torch.get_num_threads()} torch threads)\n")
    print("| measure | median | p95 |\n|---|---|---|")
    print(f"| grammar stage per token (mask + apply), ms | {statistics.median(mask_ms):.3f} | {pct(mask_ms, .95):.3f} |")
    print(f"| whole decode step, ms | {statistics.median(step_ms):.1f} | {pct(step_ms, .95):.1f} |")
    print(f"| grammar stage / step | {statistics.median(mask_ms) / statistics.median(step_ms):.2%} | |")
    print(f"\n{valid} of {samples} seeded schema outputs at temperature 1 parse and validate "
          f"({min(lengths)}-{max(lengths)} tokens).\n")
    print("| regex | runs | full matches | example |\n|---|---|---|---|")
    for name, rx in REGEXES.items():
        outs = []
        for seed in range(1 if args.quick else 5):
            s, _, _ = constrained_run(loaded, DecodingSettings(regex=rx), f"Write a {name}.", seed, 40)
            outs.append(s.text)
        cell = rx.replace("|", "\\|")  # a | inside a markdown table cell
        print(f"| {name} `{cell}` | {len(outs)} | {sum(bool(re.fullmatch(rx, o)) for o in outs)} | {outs[0]!r} |")
    if first_ok:
        print(f"\n### Libraries, replaying one valid {len(first_ok)}-token output of the schema\n")
        print("| library | version | set-up s | mask ms median | mask ms max | installed MB | notes |")
        print("|---|---|---|---|---|---|---|")
        for name, ver, setup, med, mx, mb, note in library_rows(loaded, first_ok):
            print(f"| {name} | {ver} | {setup:.2f} | {med:.4f} | {mx:.3f} | {mb:.1f} | {note} |")


if __name__ == "__main__":
    main()
