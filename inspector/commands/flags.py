"""The flags several `inspector` subcommands share, each defined once, and the range of every numeric flag.

A subcommand takes the groups it needs through argparse `parents=`: `model_flags()`, `json_flags()`,
`prompt_flags()` (--prompt, --system), `chat_flags()`, `sampling_flags()`, `max_new_tokens_flags(default)`;
`json_text(obj)` is what `--json` prints.
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
import json
from typing import Any

# lengths (the upper limit, the model's context window, is checked once it is loaded) and interventions (layers
# and heads depend on the model): the ranges of the run's description
from inspector.generation.request import MAX_NEW_TOKENS, STEER_ALPHA, STEER_LAYER
from inspector.validate import MIN_P, SEED, TEMPERATURE, TOP_K, TOP_P  # sampling: the engine's own ranges


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


def json_text(obj: Any) -> str:
    """`obj` as `--json` prints it: JSON text, non-ASCII characters as they are; with \\u escapes when a text
    holds what UTF-8 cannot write (a lone surrogate: argv's undecodable bytes), so the printed object is the
    same."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj)
    return text


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
                   help=f"{SEED.allowed}: the same seed, prompt and settings draw the same tokens; default 0")
    return p


def max_new_tokens_flags(default: int) -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--max-new-tokens", type=MAX_NEW_TOKENS.argparse, default=default, metavar="N",
                   help=f"tokens to generate at most, {MAX_NEW_TOKENS.allowed} (default {default}; "
                        "the context window ends a run sooner)")
    return p


def decoding_flags() -> argparse.ArgumentParser:
    """Penalties, bans, stop strings, beam search and constraints (`inspector.generation.settings`)."""
    from inspector.generation import settings as s

    p = _parent()
    p.add_argument("--repetition-penalty", type=s.REPETITION_PENALTY.argparse, default=1.0, metavar="R",
                   help=f"transformers rule over every id so far, {s.REPETITION_PENALTY.allowed}")
    p.add_argument("--presence-penalty", type=s.PRESENCE_PENALTY.argparse, default=0.0, metavar="P",
                   help=f"OpenAI rule over generated ids, {s.PRESENCE_PENALTY.allowed}")
    p.add_argument("--frequency-penalty", type=s.FREQUENCY_PENALTY.argparse, default=0.0, metavar="F",
                   help=f"OpenAI rule over generated ids, {s.FREQUENCY_PENALTY.allowed}")
    p.add_argument("--no-repeat-ngram-size", type=s.NO_REPEAT_NGRAM.argparse, default=0, metavar="N",
                   help=f"ban any n-gram's repeat, {s.NO_REPEAT_NGRAM.allowed}")
    p.add_argument("--logit-bias", action="append", default=[], metavar="ID=V",
                   help=f"add V ({s.LOGIT_BIAS.allowed}) to token ID's logit; repeatable")
    p.add_argument("--bad-words", action="append", default=[], metavar="TEXT",
                   help="never generate this text's tokens (with and without a leading space); repeatable")
    p.add_argument("--min-new-tokens", type=s.MIN_NEW_TOKENS.argparse, default=0, metavar="N",
                   help=f"EOS banned before N generated tokens, {s.MIN_NEW_TOKENS.allowed}")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop when the text contains TEXT (cut before it); repeatable")
    p.add_argument("--num-beams", type=s.NUM_BEAMS.argparse, default=1, metavar="B",
                   help=f"beam search (greedy), {s.NUM_BEAMS.allowed}")
    p.add_argument("--length-penalty", type=s.LENGTH_PENALTY.argparse, default=1.0, metavar="L",
                   help=f"beam search: hypotheses scored logprob / length ** L, {s.LENGTH_PENALTY.allowed}")
    p.add_argument("--json-schema", default=None, metavar="FILE", help="force the output to match this JSON Schema")
    p.add_argument("--regex", default=None, metavar="RE", help="force the output to match this regular expression")
    p.add_argument("--choice", action="append", default=[], metavar="TEXT",
                   help="force the output to equal one of the --choice strings; repeatable")
    return p



def intervention_flags() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--ablate-head", action="append", default=[], metavar="L.H",
                   help="zero head H of layer L (its output at blocks.L.attn.hook_z); repeatable")
    p.add_argument("--ablate-mlp", action="append", default=[], metavar="L",
                   help="zero the MLP output of layer L; repeatable")
    p.add_argument("--scale-head", action="append", default=[], metavar="L.H=F",
                   help="multiply head H of layer L by F; repeatable")
    p.add_argument("--steer", type=STEER_LAYER.argparse, default=None, metavar="L",
                   help="add a steering vector at blocks.L.hook_resid_pre (needs --steer-towards and --steer-away)")
    p.add_argument("--steer-towards", default=None, metavar="TEXT", help="the prompt whose mean residual to steer towards")
    p.add_argument("--steer-away", default=None, metavar="TEXT", help="the prompt whose mean residual to steer away from")
    p.add_argument("--steer-alpha", type=STEER_ALPHA.argparse, default=4.0, metavar="A",
                   help=f"steering strength, {STEER_ALPHA.allowed} (default 4)")
    return p
