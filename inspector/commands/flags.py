"""The flags several `inspector` subcommands share, each defined once, and the range of every numeric flag.

A subcommand takes the groups it needs through argparse `parents=`: `model_flags()`, `json_flags()`,
`prompt_flags()` (--prompt, --system), `chat_flags()`, `sampling_flags()`, `max_new_tokens_flags(default)`.
Each call returns a fresh parent parser: a child shares its parents' argument objects, so a parent built
once and shared would let one subcommand's default leak into another's.

Every numeric flag's `type=` is a `Bound(...).argparse` (`inspector.validate`): text that is no number, NaN,
an infinity, a float past the double range or a value outside the range is a one-line usage error (exit 2)
naming the field, the allowed range and the value, before any model loads. Limits that depend on the model
(the context window) are checked once it is loaded (InputError, exit 1). Importing this module imports
no torch (`inspector memory` runs without it).
"""

from __future__ import annotations

import argparse

from inspector.validate import Bound

# Sampling: the engine's ranges (`SamplingParams.validate`, which also refuses a temperature between 0 and its
# smallest non-zero value once the run starts).
TEMPERATURE = Bound("temperature", False, 0, note="(0 = greedy)")
TOP_K = Bound("top-k", True, 0, note="(0 = off)")
TOP_P = Bound("top-p", False, 0, 1, lo_open=True, note="(1 = off)")
MIN_P = Bound("min-p", False, 0, 1, hi_open=True, note="(0 = off)")
SEED = Bound("seed", True, 0)
# Lengths: at least one; the upper limit is the model's context window, checked after loading it.
MAX_NEW_TOKENS = Bound("max-new-tokens", True, 1)
DRAFT_LEN = Bound("draft-len", True, 1)


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def model_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--model", default=None, metavar="SOURCE",
                   help="a model name (smollm2-135m, gemma3-270m: fetched and converted on first use), an "
                   "HF-format directory, a .gguf file or a Hub repo id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu, cuda (cuda:N) or mps: where the weights and the KV cache live (default: cpu)")
    return p


def json_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (its keys: the command's documentation) instead of text")
    return p


def prompt_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--system", default=None, help="system prompt (with --chat; default: the template's)")
    return p


def chat_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--chat", action="store_true", help="wrap the prompt(s) in the model's chat template")
    return p


def sampling_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--temperature", type=TEMPERATURE.argparse, default=0.0, metavar="T",
                   help=f"{TEMPERATURE.allowed}; default 0")
    p.add_argument("--top-k", type=TOP_K.argparse, default=0, metavar="K", help=f"{TOP_K.allowed}; default 0")
    p.add_argument("--top-p", type=TOP_P.argparse, default=1.0, metavar="P", help=f"{TOP_P.allowed}; default 1")
    p.add_argument("--min-p", type=MIN_P.argparse, default=0.0, metavar="P", help=f"{MIN_P.allowed}; default 0")
    p.add_argument("--seed", type=SEED.argparse, default=0, metavar="S",
                   help=f"{SEED.allowed}: the same seed draws the same tokens; default 0")
    return p


def max_new_tokens_flags(default: int) -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--max-new-tokens", type=MAX_NEW_TOKENS.argparse, default=default, metavar="N",
                   help=f"tokens to generate at most, {MAX_NEW_TOKENS.allowed} (default {default}; "
                        "the context window ends a run sooner)")
    return p
