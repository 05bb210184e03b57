"""Fuzz of the `inspector` command, called in this process (`inspector.commands.cli.main(argv)`).

Every case is generated from the seed in tests/support/fuzz_inputs.py and must end in a result (exit 0 with output;
`--json` output parses) or exit non-zero with one line on stderr, `error: ...`, that names the problem; never
a traceback. Every HEALTH_EVERY cases the same normal run gives the same tokens as before the fuzz.
Reproduce one case: `pytest tests/unit/commands/test_fuzz_cli.py -k number-017` (its argv is in the failure message).

Generation runs on the tiny random model of tests/support/tiny.py (context window 256 tokens; a run costs
milliseconds) unless a case names no `--model`: then the real default model, loaded once for the whole
module (`load_model` is patched to hand back the session's `default_model` instead of loading it per call).
Cases run in a temporary folder, so a path argument never touches the checkout.

Every numeric flag of every subcommand (NUMERIC_FLAGS, checked complete against the parser) is also given
empty, text, nan, inf, 1e309, -5 and values just past its range: each is a one-line usage error (exit 2)
naming the field, the range and the value, with no model or config read.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.fuzz_inputs import ODD_TEXT, SEED, UNIT, Expect, error_problems, has_controls, odd_text, short
from tests.support.tiny import tiny_llama_dir  # noqa: F401 (fixture)

from inspector.commands.cli import main

pytestmark = pytest.mark.slow

HEALTH_EVERY = 50
TINY = "{TINY}"  # placeholders, filled in when a case runs (paths differ between runs; case ids do not)
GEN = ("--model", TINY, "--max-new-tokens", "3")

NUMBER_OPTIONS = {  # option -> (whole number?, names an error must contain)
    "--temperature": (False, ("temperature",)),
    "--top-k": (True, ("top-k",)),
    "--top-p": (False, ("top-p",)),
    "--min-p": (False, ("min-p",)),
    "--seed": (True, ("seed",)),
    "--max-new-tokens": (True, ("max-new-tokens", "max new tokens")),
}
NUMBER_TEXT = ["0", "1", "3", "0.5", "-1", "-0", "-0.0", "1e-300", "1e-45", "1e-7", "1e-6", "1e308", "1e400", "nan",
               "NaN", "inf", "-inf", "Infinity", "abc", "", " ", " 3 ", "1,5", "0x10", "1_0", "\u0663", "\uff15", "+2",
               "2.", ".5", "-.5", "1e3", "2**64", "18446744073709551616", "-99999999999999999999", "1.0000001",
               "0.999999", "\x00", "1\n2", "\u0661\u0662"]
NEG_NUMBER = re.compile(r"-\d+|-\d*\.\d+")  # what argparse (3.11) reads as a negative number, not an option
MODEL_NAMES = ("model", "config", "gguf", "safetensors", "directory", "file", "source", "hub", "path")
PROMPT_NAMES = ("prompt", "context", "token")


@dataclass(frozen=True)
class CliCase:
    id: str
    argv: tuple[str, ...]
    expect: Expect | None = None  # None: worked out from the prompt when the case runs

    def __repr__(self) -> str:
        return f"inspector {short(list(self.argv), 400)}"


# ---------------------------------------------------------------- cases
def as_number(text: str, whole: bool) -> int | float | None:
    """What a number flag must read `text` as (Python's own float syntax, finite; a whole number for a whole
    flag, kept exact), or None when it must refuse it."""
    try:
        x = float(text)
    except ValueError:
        return None
    if not math.isfinite(x) or (whole and not x.is_integer()):
        return None
    if not whole:
        return x
    try:
        return int(text)  # exact past 2**53
    except ValueError:
        return int(x)  # "1e3", "2."


def number_expect(option: str, text: str) -> tuple[Expect, int | float | None]:
    """What `--option text` must do, and the value it is read as: the flag's range, then the engine's."""
    whole, names = NUMBER_OPTIONS[option]
    if text.startswith("-") and not NEG_NUMBER.fullmatch(text):
        return Expect("error", names), None  # argparse takes it for an option: "expected one argument"
    v = as_number(text, whole)
    if v is None:
        return Expect("error", names), None
    valid = {
        "--temperature": lambda x: x == 0 or x >= 1e-6,
        "--top-k": lambda x: x >= 0,
        "--top-p": lambda x: 0 < x <= 1,
        "--min-p": lambda x: 0 <= x < 1,
        "--seed": lambda x: x >= 0,
        "--max-new-tokens": lambda x: x > 0,
    }[option](v)
    return Expect("ok" if valid else "error", names), v


def number_cases(rng: random.Random) -> list[CliCase]:
    cases = []
    for option in NUMBER_OPTIONS:
        for text in rng.sample(NUMBER_TEXT, 14):
            expect, value = number_expect(option, text)
            if option == "--max-new-tokens" and expect.kind == "ok" and value > 8:
                continue  # valid but long: generation up to the context end is its own case (cap-*)
            gen = [a for a in GEN if a not in ("--max-new-tokens", "3")] if option == "--max-new-tokens" else list(GEN)
            argv = ["run", "--prompt", rng.choice(("Hello", "What is 2+2?", "def f(x):")), *gen, option, text]
            if rng.random() < 0.3:
                argv.append("--json")
            cases.append(CliCase("", tuple(argv), expect))
    return [_named(c, "number", i) for i, c in enumerate(cases)]


def prompt_cases(rng: random.Random) -> list[CliCase]:
    texts = ODD_TEXT[1::2] + [odd_text(rng) for _ in range(10)]  # the API fuzz sends the other half
    cases = []
    for text in texts:
        chat = rng.random() < 0.4
        argv = ["run", f"--prompt={text}", *GEN] + (["--chat"] if chat else [])
        if chat and rng.random() < 0.5:
            argv.append(f"--system={odd_text(rng)}")
        if rng.random() < 0.3:
            argv.append("--json")
        cases.append(CliCase("", tuple(argv)))
    for text, chat in zip(rng.sample([t for t in ODD_TEXT if t.strip()], 3), (True, False, False)):
        cases.append(CliCase("", ("run", f"--prompt={text}", "--max-new-tokens", "1", "--json")
                             + (("--chat",) if chat else ())))  # the real model's tokenizer and template
    return [_named(c, "prompt", i) for i, c in enumerate(cases)]


def arg_cases() -> list[CliCase]:
    """Missing, unknown, repeated and abbreviated arguments; --help; every subcommand."""
    ok, err = Expect("ok"), lambda *names: Expect("error", names)
    cases = [
        CliCase("", (), err("command")),
        CliCase("", ("bogus",), err("bogus", "command")),
        CliCase("", ("RUN", "--prompt", "hi"), err("RUN", "command")),
        CliCase("", ("run",), err("--prompt")),
        CliCase("", ("run", "--prompt"), err("--prompt")),
        CliCase("", ("run", "--prompt", "-x", *GEN), err("--prompt")),
        CliCase("", ("run", "--prompt=-x", *GEN), ok),
        CliCase("", ("run", "--prompt", "--", *GEN), err("--prompt")),
        CliCase("", ("run", "--prompt", "hi", "--bogus", *GEN), err("--bogus", "unrecognized")),
        CliCase("", ("run", "--prompt", "hi", "extra\nline", *GEN), err("unrecognized")),
        CliCase("", ("run", "--prompt", "hi", "--dtype", "fp16", *GEN), err("--dtype")),
        CliCase("", ("run", "--prompt", "hi", "--dtype", "", *GEN), err("--dtype")),
        CliCase("", ("run", "--prompt", "hi", "--dtype", "bf16", *GEN), ok),
        CliCase("", ("run", "--prompt", "hi", "--chat", "--system", "", *GEN), ok),
        CliCase("", ("run", "--prompt", "hi", "--system", "ignored without --chat", *GEN), ok),
        CliCase("", ("run", "--prompt", "hi", "--system", *GEN), err("--system")),
        CliCase("", ("run", "--prompt", "hi", "--no-cache", "--json", *GEN), ok),
        CliCase("", ("run", "--prompt", "hi", "--temp", "0.5", *GEN), ok),  # argparse takes unique prefixes
        CliCase("", ("run", "--prompt", "hi", "--t", "0.5", *GEN), err("ambiguous", "--t")),
        CliCase("", ("run", "--prompt", "a", "--prompt", "b", *GEN), ok),  # the last one wins
        CliCase("", ("run", "--prompt", "hi", "--json", "--json", *GEN), ok),
        CliCase("", ("run", "--prompt", "hi", "--chat=yes", *GEN), err("--chat")),
        CliCase("", ("--help",), ok), CliCase("", ("-h",), ok), CliCase("", ("run", "--help"), ok),
        CliCase("", ("info", "-h"), ok), CliCase("", ("space", "--help"), ok),
        CliCase("", ("info", "--model", TINY), ok), CliCase("", ("info", "--json", "--model", TINY), ok),
        CliCase("", ("info",), ok), CliCase("", ("info", "extra"), err("unrecognized")),
        CliCase("", ("info", "--model"), err("--model")),
        CliCase("", ("space",), err("space_command", "required")),
        CliCase("", ("space", "bogus"), err("bogus", "invalid choice")),
        CliCase("", ("space", "build"), err("DIR", "dir")),
        CliCase("", ("space", "build", ""), err("DIR")),
        CliCase("", ("space", "build", "   "), err("DIR")),
        CliCase("", ("space", "build", "{FILE}"), err("not a directory")),
        CliCase("", ("space", "build", "{NONEMPTY}"), err("not empty")),
        CliCase("", ("space", "deploy"), err("REPO_ID", "repo_id")),
        CliCase("", ("space", "deploy", ""), err("Space id")),
        CliCase("", ("space", "deploy", "not a repo"), err("Space id")),
        CliCase("", ("space", "deploy", "a/b/c"), err("Space id")),
        CliCase("", ("space", "deploy", "owner/name\n"), err("Space id")),
        CliCase("", ("space", "deploy", "-x"), err("REPO_ID", "repo_id", "-x")),
        CliCase("", ("space", "deploy", "\u202eowner/name"), err("Space id")),
        CliCase("", ("memory",), err("--config")),
        CliCase("", ("memory", "--list"), ok),
        CliCase("", ("memory", "--config", TINY, "--json"), ok),
        CliCase("", ("memory", "--config", ""), err("--config")),
        CliCase("", ("memory", "--config", "nonexistent"), err("config")),
        CliCase("", ("memory", "--config", "{CFG_LIST}"), err("config")),
        CliCase("", ("memory", "--config", "{CFG_ZERO_HEADS}"), err("num_attention_heads")),
        CliCase("", ("memory", "--config", TINY, "--batch", "0"), err("--batch")),
        CliCase("", ("memory", "--config", TINY, "--batch", "abc"), err("--batch")),
        CliCase("", ("memory", "--config", TINY, "--context", "-5"), err("--context")),
        CliCase("", ("memory", "--config", TINY, "--context", "1e400"), err("--context")),
        CliCase("", ("memory", "--config", TINY, "--memory", "nan GB"), err("--memory")),
        CliCase("", ("memory", "--config", TINY, "--dtype", "bogus"), err("dtype")),
        CliCase("", ("memory", "--config", TINY, "--kv-dtype", ""), Expect("either", ("dtype",))),
        CliCase("", ("memory", "--config", TINY, "--context", "99999999999999999999", "--batch", "99999999999"), ok),
    ]
    return [_named(c, "args", i) for i, c in enumerate(cases)]


def model_cases() -> list[CliCase]:
    """--model values that are not models: each must be one line naming what is wrong."""
    sources = ["a\x00b", "x" * 5000, "/dev/null", "/", "/etc", "owner/name", "https://huggingface.co/a/b", "{FILE}",
               "{EMPTY}", "{CFG_BAD_JSON}", "{CFG_LIST}", "{CFG_EMPTY}", "{CFG_ZERO_HEADS}", "{CFG_STR_SIZE}",
               "{GARBAGE_GGUF}", "~", "-", "..", "nonexistent.gguf", "{TINY}/config.json", " ", "\u202e", "🤖/🤖"]
    cases = [CliCase("", ("run", "--prompt", "hi", "--max-new-tokens", "1", "--model", s), Expect("error", MODEL_NAMES))
             for s in sources]
    cases += [CliCase("", ("info", "--model", s), Expect("error", MODEL_NAMES)) for s in sources[::3]]
    cases += [CliCase("", ("run", "--prompt", "hi", "--max-new-tokens", "1", "--model", s), Expect("ok"))
              for s in ("", "default")]  # both mean the embedded default
    return [_named(c, "model", i) for i, c in enumerate(cases)]


def cap_cases() -> list[CliCase]:
    """The context window (tiny: 256 tokens) just under and over, with and without the chat template, and a
    huge --max-new-tokens that the context end stops."""
    tokens = lambda n, chat=False: "{CHATTOKENS:%d}" % n if chat else "{TOKENS:%d}" % n  # noqa: E731
    err = Expect("error", PROMPT_NAMES)
    cases = [CliCase("", ("run", "--prompt", tokens(n), "--model", TINY, "--max-new-tokens", "4"),
                     Expect(k, PROMPT_NAMES))
             for n, k in ((254, "ok"), (255, "ok"), (256, "error"), (257, "error"), (5000, "error"))]
    cases += [CliCase("", ("run", "--prompt", tokens(n, True), "--chat", "--model", TINY, "--json"),
                      Expect(k, PROMPT_NAMES))
              for n, k in ((255, "ok"), (256, "error"))]
    cases += [CliCase("", ("run", "--prompt", "hi", "--chat", "--system", tokens(300), "--model", TINY), err),
              CliCase("", ("run", "--prompt", tokens(250), "--model", TINY, "--json", "--max-new-tokens",
                           "18446744073709551616"), Expect("ok"))]
    return [_named(c, "cap", i) for i, c in enumerate(cases)]


def _named(case: CliCase, prefix: str, i: int) -> CliCase:
    return CliCase(f"{prefix}-{i:03d}", case.argv, case.expect)


def all_cases() -> list[CliCase]:
    rng = random.Random(SEED + 1)  # the API fuzz uses SEED itself
    cases = number_cases(rng) + prompt_cases(rng) + arg_cases() + model_cases() + cap_cases()
    assert len({c.id for c in cases}) == len(cases)
    return cases


CASES = all_cases()


# ---------------------------------------------------------------- environment
class Env:
    """Paths the cases name, the loaded models, and the normal run's tokens before the fuzz."""

    def __init__(self, tmp: Path, tiny_dir: Path, default_model: Any) -> None:
        from inspector.models.loader import load_model

        self.tmp = tmp
        self.default = default_model
        self.tiny = load_model(str(tiny_dir))
        (tmp / "file.txt").write_text("not a model\n")
        (tmp / "nonempty").mkdir()
        (tmp / "nonempty" / "keep.txt").write_text("x")
        (tmp / "empty").mkdir()
        (tmp / "garbage.gguf").write_bytes(b"not a gguf at all")
        configs = {"CFG_BAD_JSON": "{", "CFG_LIST": "[]", "CFG_EMPTY": "{}",
                   "CFG_ZERO_HEADS": json.dumps({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
                                                 "num_hidden_layers": 1, "num_attention_heads": 0}),
                   "CFG_STR_SIZE": json.dumps({"vocab_size": 10, "hidden_size": "abc", "intermediate_size": 8,
                                               "num_hidden_layers": 1, "num_attention_heads": 2})}
        self.paths = {"TINY": str(tiny_dir), "FILE": str(tmp / "file.txt"), "NONEMPTY": str(tmp / "nonempty"),
                      "EMPTY": str(tmp / "empty"), "GARBAGE_GGUF": str(tmp / "garbage.gguf")}
        for name, text in configs.items():
            (tmp / name).mkdir()
            (tmp / name / "config.json").write_text(text)
            self.paths[name] = str(tmp / name)
        self.done = 0
        self.reference: Any = None

    def fill(self, arg: str) -> str:
        """An argument with its placeholders filled in."""
        def token_prompt(m: re.Match) -> str:
            chat, n = m.group(1) == "CHAT", int(m.group(2))
            tok = self.tiny.tokenizer
            base = len(tok.encode(tok.render_chat("", system=None))) if chat else 0
            text = UNIT * (n - base)
            got = len(tok.encode(tok.render_chat(text) if chat else text))
            assert got == n, f"could not build a {n}-token prompt (got {got})"
            return text
        arg = re.sub(r"\{(CHAT)?TOKENS:(\d+)\}", token_prompt, arg)
        for key, value in self.paths.items():
            arg = arg.replace("{" + key + "}", value)
        return arg

    def prompt_expect(self, argv: list[str]) -> Expect:
        """Blank prompts are refused, prompts reaching the context window are refused, the rest is text."""
        prompt = _option(argv, "--prompt")
        system = _option(argv, "--system")
        chat = "--chat" in argv
        if not prompt.strip():
            return Expect("error", PROMPT_NAMES)
        loaded = self.tiny if _option(argv, "--model") else None
        tok = (loaded or self.default).tokenizer
        n = len(tok.encode(tok.render_chat(prompt, system=system) if chat else prompt))
        context = (loaded or self.default).config.max_position_embeddings
        if n >= context:
            return Expect("error", PROMPT_NAMES)
        return Expect("either" if has_controls(prompt + (system or "")) else "ok", PROMPT_NAMES)

    def normal(self, capsys: Any) -> Any:
        argv = ["run", "--prompt", "The quick brown fox", *self.fill_all(GEN), "--json"]
        rc, out, err, raised = run_cli(argv, capsys)
        return json.loads(out)["generated_ids"] if rc == 0 and not raised else (rc, err, raised)

    def fill_all(self, argv: tuple[str, ...] | list[str]) -> list[str]:
        return [self.fill(a) for a in argv]


def _option(argv: list[str], name: str) -> str | None:
    """The last value given to option `name` (`--name value` or `--name=value`), or None."""
    value = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a[len(name) + 1:]
    return value


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_llama_dir, default_model):  # noqa: F811
    import torch

    import inspector.models.loader as loader

    real_load = loader.load_model
    cache: dict = {}

    def load_model(source: Any = None, dtype: Any = torch.float32, **kw: Any) -> Any:
        """The session's default model instead of a reload (seconds) per call; other sources load once."""
        device = kw.get("device")
        if source in (None, "", "default") and dtype == torch.float32 and device in (None, "cpu"):
            return default_model
        key = (str(source), dtype, str(device))
        if key not in cache:
            cache[key] = real_load(source, dtype, **kw)
        return cache[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "load_model", load_model)
        yield Env(tmp_path_factory.mktemp("fuzz_cli"), tiny_llama_dir, default_model)


def run_cli(argv: list[str], capsys: Any) -> tuple[Any, str, str, str | None]:
    """(exit code, stdout, stderr, the exception that escaped main, if any)."""
    capsys.readouterr()
    raised = None
    try:
        rc: Any = main(list(argv))
    except SystemExit as exc:  # argparse: --help (0) and bad arguments (2)
        rc = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except Exception as exc:  # a traceback for the user
        rc, raised = None, f"{type(exc).__name__}: {exc}"
    captured = capsys.readouterr()
    return rc, captured.out, captured.err, raised


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_case(case: CliCase, env: Env, capsys, monkeypatch):
    monkeypatch.chdir(env.tmp)
    if env.reference is None:
        env.reference = env.normal(capsys)
        assert isinstance(env.reference, list), f"the normal run fails before any fuzz: {env.reference}"
    argv = env.fill_all(case.argv)
    expect = case.expect or env.prompt_expect(argv)
    rc, out, err, raised = run_cli(argv, capsys)
    problems = []
    if raised:
        problems.append(f"raised {short(raised, 300)} out of main (a traceback for the user)")
    elif rc == 0:
        if expect.kind == "error":
            problems.append("exit 0, but it must be refused")
        if not out:
            problems.append("exit 0 with no output")
        elif "--json" in argv and argv[:1] == ["run"]:
            try:
                if not isinstance(json.loads(out).get("generated_ids"), list):
                    problems.append("--json output lacks generated_ids")
            except ValueError:
                problems.append(f"--json output is not JSON: {short(out)}")
    else:
        if expect.kind == "ok":
            problems.append(f"exit {rc}, but it must be taken")
        if out.strip():
            problems.append(f"an error, yet stdout has {short(out)}")
        problems += error_problems(err, expect.names)
        if not err.startswith("error:"):
            problems.append("stderr does not start with 'error:'")
    env.done += 1
    if env.done % HEALTH_EVERY == 0 and (now := env.normal(capsys)) != env.reference:
        problems.append(f"a normal run now gives {short(now)}, before the fuzz {short(env.reference)}")
    assert not problems, (f"{case.id} (seed {SEED + 1}): {case!r} -> exit {rc}, stderr {short(err, 300)}; "
                          f"expected {expect.kind}: " + "; ".join(problems))


def test_normal_run_after_fuzz(env: Env, capsys, monkeypatch):
    """After every case: the same normal run as before the fuzz gives the same tokens."""
    monkeypatch.chdir(env.tmp)
    now = env.normal(capsys)
    assert now == (env.reference if env.reference is not None else now) and isinstance(now, list), now


# ---------------------------------------------------------------- every numeric flag, refused as it is parsed
# (subcommand with its required arguments, flag, the field its message names, values just past its range)
RUN, QUANT = ("run", "--prompt", "hi"), ("quant", "--prompt", "hi", "--quant", "int8")
SERVE, MEMORY = ("serve-sim", "--prompts", "prompts.txt"), ("memory", "--config", "meta-llama/Llama-3.1-8B")
KV_EVAL = ("kv-eval", "--text-file", "text.txt", "--policy", "h2o")
HEADS = ("heads",)
NUMERIC_FLAGS = [
    (RUN, "--max-new-tokens", "max-new-tokens", ("0",)),
    (RUN, "--temperature", "temperature", ("-1e-9", "1e-9")),  # between 0 and the smallest non-zero temperature
    (RUN, "--top-k", "top-k", ("-1", "0.5")),
    (RUN, "--top-p", "top-p", ("0", "1.0000001")),
    (RUN, "--min-p", "min-p", ("1", "-0.1")),
    (RUN, "--seed", "seed", ("-1", "1.5")),
    (RUN, "--draft-len", "draft-len", ("0",)),
    (RUN, "--repetition-penalty", "repetition-penalty", ("0",)),
    (RUN, "--presence-penalty", "presence-penalty", ("2.5",)),
    (RUN, "--frequency-penalty", "frequency-penalty", ("-2.01",)),
    (RUN, "--no-repeat-ngram-size", "no-repeat-ngram-size", ("1.5",)),
    (RUN, "--min-new-tokens", "min-new-tokens", ("-1",)),
    (RUN, "--num-beams", "num-beams", ("0", "17")),
    (RUN, "--length-penalty", "length-penalty", ("3.5",)),
    (RUN, "--steer", "steer layer", ("-1", "1.5")),
    (RUN, "--steer-alpha", "steer-alpha", ("1000.5",)),
    (QUANT, "--max-new-tokens", "max-new-tokens", ("0",)),
    (SERVE, "--max-new-tokens", "max-new-tokens", ("0",)),
    (SERVE, "--max-batch", "max-batch", ("0",)),
    (SERVE, "--block-size", "block-size", ("0",)),
    (SERVE, "--blocks", "blocks", ("0",)),
    (SERVE, "--prefill-chunk", "prefill-chunk", ("0",)),
    (SERVE, "--arrivals", "arrivals", ("0,-1", "0,,1", "0,1.5")),
    (SERVE, "--arrival-every", "arrival-every", ("-1",)),
    (SERVE, "--n", "n", ("0",)),
    (SERVE, "--temperature", "temperature", ("-0.5",)),
    (SERVE, "--top-k", "top-k", ("-1",)),
    (SERVE, "--top-p", "top-p", ("1.5",)),
    (SERVE, "--min-p", "min-p", ("1",)),
    (SERVE, "--seed", "seed", ("-1",)),
    (MEMORY, "--context", "context", ("0",)),
    (MEMORY, "--batch", "batch", ("0", "2.5")),
    (MEMORY, "--memory", "memory", ("0GB", "1e308TB", "5XB", "0.5b")),
    (KV_EVAL, "--budget", "budget", ("0", "2.5")),
    (KV_EVAL, "--sinks", "sinks", ("0",)),
    (KV_EVAL, "--prefill", "prefill", ("0",)),
    (HEADS, "--probe-len", "probe-len", ("1", "2.5")),
    (HEADS, "--probes", "probes", ("0",)),
    (HEADS, "--seed", "seed", ("-1",)),
    (HEADS, "--top-k", "top-k", ("0",)),
]
BAD_NUMBERS = ("", "abc", "nan", "inf", "1e309", "-5")
FLAG_CASES = [(cmd, flag, field, value) for cmd, flag, field, past in NUMERIC_FLAGS for value in BAD_NUMBERS + past]


@pytest.mark.parametrize("cmd, flag, field, value", FLAG_CASES,
                         ids=[f"{c[0]}{f}={v!r}" for c, f, _, v in FLAG_CASES])
def test_a_bad_number_is_one_usage_line(cmd, flag, field, value, capsys, monkeypatch):
    """Exit 2 with one line naming the field, its range and the value, before any model or config is read."""
    import inspector.models.loader as loader
    import inspector.serving.memory as mem

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a bad flag got past argparse")

    monkeypatch.setattr(loader, "load_model", never)
    monkeypatch.setattr(mem, "resolve_config", never)
    rc, out, err, raised = run_cli([*cmd, f"{flag}={value}"], capsys)  # "=": argparse never takes it for an option
    assert (rc, out, raised) == (2, "", None), (rc, out, raised, err)
    assert err.startswith(f"error: inspector {cmd[0]}: argument {flag}: {field} ") and err.count("\n") == 1, err
    assert "must be" in err and repr(value) in err or value == "" and f"{field} is empty" in err, err


def test_every_numeric_flag_is_in_the_table():
    """Any flag with a `type=` (a number) of any subcommand is in NUMERIC_FLAGS, so it is fuzzed above."""
    from inspector.commands.cli import build_parser

    def flags(parser: Any, path: tuple[str, ...]) -> set[tuple[str, str]]:
        found = set()
        for action in parser._actions:
            if action.choices and isinstance(action.choices, dict):  # subcommands
                for name, sub in action.choices.items():
                    found |= flags(sub, (*path, name))
            elif action.type is not None:
                found.add((" ".join(path), action.option_strings[0] if action.option_strings else action.dest))
        return found

    listed = {(cmd[0], flag) for cmd, flag, _, _ in NUMERIC_FLAGS}
    assert flags(build_parser(), ()) == listed
