"""The views' sentences against the code and the run that make their numbers (issue 32, the views' side).

Each test checks a sentence that could be false: the glossary defines every term the captions, tour and status
line use; the logit lens's commitment is worded as what the lens shows; decode's FLOPs per byte are computed
per dtype and compared with the ridge point rather than asserted; the model numbers a sentence names come from
the config (a tiny Llama and a tiny Gemma 3 with local layers); greedy's probability is the model's; the KV
view's allocated bytes are the cache's own; a removed token names the stage that removed it; the soft-cap is
named in a Gemma 2 lens; `--help` lists the JSON keys; the README's byte sizes use the units it states.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import inspector.viz
from inspector.engine.config import SamplingParams
from inspector.engine.kv_cache import kv_bytes
from inspector.session.session import Session
from inspector.viz import kvcache as vk
from inspector.viz import residual as vr
from inspector.viz import sampling as vs
from inspector.viz import tokens as vtok
from inspector.viz.glossary import GLOSSARY, glossary_terms
from inspector.viz.header import status_html
from inspector.viz.pipeline import ModelFacts, pipeline_html
from inspector.viz.tour import TourFacts, intensity, tour_html
from tests.support.viz_records import tiny_loaded, tiny_run  # noqa: F401 (fixtures)
from tests.support.viz_records import FakePrefill
from tests.support.tiny import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[3]
GREEDY = SamplingParams()

# Terms the page uses that a learner may not know (issue 32 names the first ten): each needs an entry.
PAGE_TERMS = ("min-p", "KL divergence", "nats", "perplexity", "logit lens", "attention sink", "TTFT", "TPOT",
              "roofline", "arithmetic intensity", "ridge point", "memory-bound", "top-k", "top-p", "temperature",
              "greedy", "seed", "entropy", "softmax", "logits", "LM head", "RMSNorm", "final norm",
              "residual stream", "KV cache", "GQA", "MHA", "KV head", "prefill", "decode", "token", "embedding",
              "soft-cap", "sliding window", "local layer", "global layer", "causal", "RoPE", "MLP",
              "decided at layer", "beam search", "log-probability", "KiB", "MiB", "GiB", "GB/s", "FLOP",
              "tok/s", "L2 norm", "EOS", "cross-entropy", "top-1 agreement", "speculative decoding",
              "quantization", "branch", "chat template")

# Jargon a caption may use, as a pattern -> the glossary term that defines it.
JARGON = {r"logit lens": "logit lens", r"\bTTFT\b": "ttft", r"\bTPOT\b": "tpot", r"\bGQA\b": "gqa",
          r"\bKV cache\b": "kv cache", r"\bmin-p\b": "min-p", r"\btop-p\b": "top-p", r"\btop-k\b": "top-k",
          r"\bsoftmax\b": "softmax", r"RMSNorm|final norm": "rmsnorm", r"\bLM head\b": "lm head",
          r"residual stream": "residual stream", r"\bnats?\b": "nats", r"\bKL\b": "kl divergence",
          r"perplexity": "perplexity", r"roofline": "roofline", r"ridge point": "ridge point",
          r"FLOPs?\b": "flop", r"GB/s": "gb/s", r"\bMiB\b": "mib", r"\bKiB\b": "kib",
          r"attention sink": "attention sink",
          r"sliding-window|local layer": "sliding window", r"soft-cap": "soft-cap", r"\bentropy\b": "entropy",
          r"\bgreedy\b": "greedy", r"\bseed\b": "seed", r"L2 norm|‖x‖": "l2 norm", r"\bMHA\b": "mha",
          r"\bbeam": "beam search", r"memory-bound|bandwidth-bound": "memory-bound", r"\btok/s\b": "tok/s",
          r"\bcausal\b": "causal", r"\blogits?\b": "logits", r"\bprefill\b": "prefill", r"\bdecode\b": "decode"}

LENS_CAVEAT = re.compile(r"lens reads early layers poorly")


def _captions() -> dict[str, str]:
    """Every viz module's CAPTION (the page shows each above its view)."""
    out = {}
    for info in pkgutil.iter_modules(inspector.viz.__path__):
        module = importlib.import_module(f"inspector.viz.{info.name}")
        if isinstance(getattr(module, "CAPTION", None), str):
            out[info.name] = module.CAPTION
    return out


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_the_glossary_defines_every_term_the_page_uses():
    terms = glossary_terms()
    missing = [t for t in PAGE_TERMS if t.lower() not in terms]
    assert not missing, missing
    assert len(terms) >= len(GLOSSARY) and all(meaning.strip() for _, meaning in GLOSSARY)


def test_every_term_a_caption_tour_or_status_line_uses_is_in_the_glossary(tiny_loaded, tiny_run):  # noqa: F811
    from inspector.ui.tour_panel import tour_facts

    texts = dict(_captions())
    texts["tour"] = _text(tour_html(tour_facts(tiny_loaded), tiny_run.records[-1], "x")).split("The words the views use")[0]
    texts["status"] = _text(status_html("decode step 1", {"ttft_ms": 1.0, "last_tpot_ms": 1.0, "tok_s": 1.0}))
    terms = glossary_terms()
    assert set(JARGON.values()) <= set(terms), set(JARGON.values()) - set(terms)
    used = {name: sorted({term for pattern, term in JARGON.items() if re.search(pattern, text)})
            for name, text in texts.items()}
    assert used["tour"] and used["residual"] and used["timing"]  # the scan reads what the page shows
    assert all(term in terms for found in used.values() for term in found)


def test_commitment_is_worded_as_what_the_lens_shows(tiny_run):  # noqa: F811
    chips = vtok.token_chips_html([5, 6], ["a", "b"], [False, False], 1, decided={1: (1, True)})
    badge_title = re.search(r'data-pos="1" data-id="6" title="([^"]*)"', chips).group(1)
    assert "decided at layer 1 by the logit lens" in badge_title and LENS_CAVEAT.search(badge_title)
    other = vtok.token_chips_html([5, 6], ["a", "b"], [False, False], 1, decided={1: (1, False)})
    assert "not the model&#x27;s top-1" in other
    assert "lens reads early layers poorly" in vr.CAPTION and "not when the model" in vtok.CAPTION
    rec = tiny_run.records[-1]
    tiny_run.logit_lens(rec.step)
    lens = vr.logit_lens_html(rec, rec.sample.token_piece)
    assert LENS_CAVEAT.search(lens) and "<th>after layer</th>" in lens
    assert "Belrose" in glossary_terms()["logit lens"] and "nostalgebraist" in glossary_terms()["logit lens"]


@pytest.mark.parametrize("elem, dtype", [(4, "float32"), (2, "bfloat16")])
def test_decode_flops_per_byte_are_computed_per_dtype_against_the_ridge(elem, dtype):
    facts = TourFacts(64, 2, 4, 2, 16, 320, elem, kv_bytes_per_token=2 * 2 * 2 * 16 * elem, dtype=dtype)
    assert intensity(elem) == 2 / elem and intensity(elem, 12) == 24 / elem
    weights = _step(tour_html(facts, None), "weights")
    assert f"{2 / elem:g} FLOP per byte" in weights and "ridge point" in weights
    slow = _step(tour_html(dataclasses.replace(facts, ridge=2 / elem * 6), None), "weights")
    fast = _step(tour_html(dataclasses.replace(facts, ridge=2 / elem / 2), None), "weights")  # a hypothetical machine
    assert "decode is memory-bound" in slow and "decode is compute-bound" in fast
    prefill = FakePrefill(12)
    below = _step(tour_html(dataclasses.replace(facts, ridge=24 / elem + 1), prefill), "weights")  # type: ignore[arg-type]
    above = _step(tour_html(dataclasses.replace(facts, ridge=24 / elem - 1), prefill), "weights")  # type: ignore[arg-type]
    assert f"12 tokens did {24 / elem:g} FLOP per byte" in below
    assert "were memory-bound here" in below and "were compute-bound here" in above
    assert "reads all the weights once: that, not the arithmetic" not in weights


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    """A tiny Gemma 3 with one local layer of three, numbers unlike the tiny Llama's, run greedily."""
    directory = make_tiny_checkpoint(tmp_path_factory.mktemp("gemma3"), model_type="gemma3_text",
                                     hidden_size=48, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=1,
                                     head_dim=8, sliding_window=5, query_pre_attn_scalar=8,
                                     rope_local_base_freq=100.0,
                                     layer_types=["sliding_attention", "full_attention", "full_attention"])
    from inspector.models.loader import load_model

    s = Session(load_model(str(directory)))
    s.prefill("The quick brown fox jumps over the lazy dog.", GREEDY, max_new_tokens=6)
    s.step(GREEDY)
    return s


@pytest.fixture(params=["llama", "gemma3"])
def run(request, tiny_run, gemma3):  # noqa: F811
    return tiny_run if request.param == "llama" else gemma3


def test_the_numbers_a_sentence_names_come_from_the_config(run):
    cfg, loaded = run.config, run.loaded
    facts = TourFacts.from_config(cfg, 4, kv_bytes(cfg, 1, 4), weight_bytes=1000)
    pipe = ModelFacts(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
                      cfg.vocab_size)
    local = sum(cfg.layer_type(i) == "sliding_attention" for i in range(cfg.num_hidden_layers))
    for rec in run.records:
        html = tour_html(facts, rec, "x")
        layers = _step(html, "layers")
        assert f"Each of the {cfg.num_hidden_layers} layers" in layers
        assert f"{cfg.num_attention_heads} query heads reading {cfg.num_key_value_heads} key/value heads" in layers
        if local:
            assert f"{local} of the {cfg.num_hidden_layers} layers {'is' if local == 1 else 'are'} local" in layers and f"newest {cfg.sliding_window:,} positions" in layers
        else:
            assert "local" not in layers
        f = vk.formula(rec.kv)
        assert f'data-bytes="{f["total"]}"' in html and f["total"] == f["measured"] == kv_bytes(cfg, f["tokens"], 4)
        strip = pipeline_html(rec, pipe)
        assert f"<b>{cfg.num_hidden_layers} layers</b>" in strip
        assert f"{cfg.num_attention_heads} q / {cfg.num_key_value_heads} kv heads" in strip
        assert f"{rec.n_new} × {cfg.hidden_size}" in strip
        kv_sentence = _step(html, "kv")
        share = cfg.num_attention_heads // cfg.num_key_value_heads
        assert f"the cache is {share}× smaller" in kv_sentence
    assert loaded.config is cfg


def test_greedy_shows_the_models_probability_not_the_one_hot(gemma3):
    rec = gemma3.records[-1]
    s = rec.sample
    chosen = next(c for c in s.candidates if c.id == s.token_id)
    assert chosen.prob_final == 1.0 and chosen.prob_raw < 1.0  # greedy's final distribution is one-hot
    cfg = gemma3.config
    strip = pipeline_html(rec, ModelFacts(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                                          cfg.num_key_value_heads, cfg.vocab_size))
    assert f"p {chosen.prob_raw:.2f}" in strip
    token = _step(tour_html(TourFacts.from_config(cfg, 4, kv_bytes(cfg, 1, 4)), rec, "x"), "token")
    assert f"the model gave probability {chosen.prob_raw:.2f}" in token


def test_the_tours_ttft_is_the_sessions(tiny_loaded, tiny_run):  # noqa: F811
    from inspector.ui.tour_panel import tour_facts

    timing = _step(tour_html(tour_facts(tiny_loaded), tiny_run.records[0], "x"), "timing")
    assert f"= {tiny_run.ttft_ms:.0f} ms" in timing and "tokenizing" in timing and "the draw" in timing


def test_the_kv_views_allocated_bytes_are_the_caches_own(tiny_run, gemma3):  # noqa: F811
    for s in (tiny_run, gemma3):
        rec = s.records[-1]
        html = vk.summary_html(rec.kv, 10**9)
        allocated = int(re.search(r'data-allocated="(\d+)"', html).group(1))
        assert allocated == s.trace.cache.allocated_nbytes > int(re.search(r'data-bytes="(\d+)"', html).group(1))
        assert f"room for {s.trace.cache.capacity:,} positions per layer" in html


def test_a_removed_token_names_the_stage_that_removed_it(tiny_loaded):  # noqa: F811
    from inspector.generation.levers import Levers

    class BanTop:
        """Masks the two highest raw logits (a ban, before temperature and the filters)."""

        name = "ban top 2"

        def __call__(self, ids, logits):
            return logits.scatter(-1, logits.topk(2).indices, float("-inf"))

    s = Session(tiny_loaded, levers=Levers(processors=(BanTop(),)))
    params = SamplingParams(temperature=0.8, top_k=3, seed=4)
    s.prefill("the cat and the dog", params, max_new_tokens=4)
    sample = s.records[-1].sample
    banned, rest = sample.candidates[:2], sample.candidates[2:]
    assert all(vs.removed_by(c, sample.stages) == ["ban top 2"] for c in banned)
    assert all(vs.removed_by(c) == ["top-k", "top-p", "min-p"] for c in banned)  # what the bars said before
    assert [c for c in rest if c.prob_final > 0] == rest[:3]  # top-k 3 of what the ban left
    assert all(vs.removed_by(c, sample.stages) == ["top-k"] for c in rest[3:])
    names = [t.name for t in vs.sampling_bars(sample).data]
    assert names[1] == "after ban top 2 and temperature 0.8"


def test_a_soft_capped_lens_says_so(tmp_path):
    from inspector.models.loader import load_model

    directory = make_tiny_checkpoint(tmp_path / "g2", model_type="gemma2", sliding_window=6,
                                     query_pre_attn_scalar=16, attn_logit_softcapping=3.0, final_logit_softcapping=4.0)
    s = Session(load_model(str(directory)))
    s.prefill("The quick brown fox", GREEDY, max_new_tokens=3)
    rec = s.records[-1]
    s.logit_lens(rec.step)
    assert rec.sample.softcap == 4.0 and "LM head → soft-cap" in vr.logit_lens_html(rec)


def test_help_ends_with_the_json_keys_the_readme_points_to():
    from inspector.commands.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    helps = {name: " ".join(sub[name].format_help().split()) for name in ("run", "info", "trace")}
    for key in ("resid_norms", "kv_bytes", "ttft_ms", "tpot_ms", "chosen_id", "stages"):
        assert key in helps["run"], key
    for key in ("tied_to", "groups", "tensors", "source_bytes"):
        assert key in helps["info"], key
    assert "branches" in helps["trace"] and "shown_branch" in helps["trace"]
    assert "`inspector info --help`, `inspector run --help`" in (ROOT / "README.md").read_text()


def test_the_readmes_byte_sizes_use_the_units_it_states():
    from inspector.serving.memory import resolve_config, weight_bytes
    from inspector.units import format_bytes

    readme = (ROOT / "README.md").read_text()
    assert "**Units.**" in readme and not re.findall(r"\d\s?KB\b", readme)
    shown = re.search(r"Llama-3\.1-70B --context 8192 --dtype bf16\s+# ([\d.]+ GiB) of weights", readme).group(1)
    assert shown == format_bytes(weight_bytes(resolve_config("meta-llama/Llama-3.1-70B").config, "bf16"))


def _step(html: str, key: str) -> str:
    """One tour step's plain text."""
    body = re.search(rf'data-stage="{key}".*?class="ii-tour-text">(.*?)</div>', html, re.S).group(1)
    return _text(body).replace("&quot;", '"')
