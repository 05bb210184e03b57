"""The quantization goals on the real default model, and `inspector quant` / its errors through the CLI.

int8 weights hold <= 0.3x of fp32's bytes with top-1 agreement >= 0.97 teacher-forced on fp32's greedy
continuation; int4-g32 <= 0.2x; int4-g128 is refused in one line (128 does not divide 576)."""

from __future__ import annotations

import json

import pytest

from inspector.commands import cli
from inspector.quant.lab import QuantLab
from inspector.quant.model import planned_weight_bytes
from inspector.quant.schemes import parse_scheme
from tests.support.tiny import tiny_llama_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def test_int8_and_int4_meet_the_memory_and_agreement_goals(default_model):
    lab = QuantLab(default_model)
    tok = default_model.tokenizer
    ids = tok.encode(tok.render_chat("What is gravity?"))
    rec = lab.compare(ids, 12, "int8")
    assert rec.weight_bytes <= 0.3 * rec.fp32_weight_bytes and rec.fp32_weight_bytes > 5e8
    assert rec.top1_agreement >= 0.97 and rec.kl_mean < 0.05 and rec.positions == 12
    assert min(x.resid_cos_min for x in rec.layers) > 0.99 and len(rec.layers) == 30
    int4 = planned_weight_bytes(default_model.model, parse_scheme("int4:32"))  # equal to the built model's (test_quant)
    assert int4 <= 0.2 * rec.fp32_weight_bytes
    assert lab.compare(ids, 12, "fp32").kl_max == 0.0  # the fp32 model against itself


def test_quant_json_on_the_tiny_model(tiny_llama_dir, capsys):  # noqa: F811
    rc = cli.main(["quant", "--prompt", "The quick brown fox", "--quant", "int4:32", "--kv-quant", "int8",
                   "--max-new-tokens", "3", "--model", str(tiny_llama_dir), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"scheme", "kv", "weight_bytes", "fp32_weight_bytes", "positions", "kl_mean", "kl_max",
                        "top1_agreement", "first_divergence_step", "layers"}
    assert out["scheme"] == "int4:32" and out["kv"] == "int8" and out["positions"] == 3
    assert out["weight_bytes"] < 0.25 * out["fp32_weight_bytes"] and 0 <= out["top1_agreement"] <= 1
    assert [x["layer"] for x in out["layers"]] == [0, 1] and all(x["resid_cos_min"] <= 1.0 + 1e-9 for x in out["layers"])


@pytest.mark.parametrize("args,message", [
    (["--quant", "int5"], "unknown quantization scheme 'int5'"),
    (["--quant", "int4:7"], "the int4 group size must be an even whole number >= 2"),
    (["--quant", "int8", "--kv-quant", "fp8"], "unknown KV cache precision 'fp8'"),
    (["--quant", "int4:128"], "does not divide the hidden size 64"),
])
def test_bad_input_is_one_line(tiny_llama_dir, capsys, args, message):  # noqa: F811
    rc = cli.main(["quant", "--prompt", "Hello", "--model", str(tiny_llama_dir), *args])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_session_over_int8_weights_and_an_int8_kv_cache(tiny_llama_dir):  # noqa: F811
    from inspector.engine.config import SamplingParams
    from inspector.models.loader import load_model
    from inspector.quant.kv_int8 import Int8KVCache
    from inspector.quant.session import quantized_session
    from inspector.session.session import Session

    loaded = load_model(tiny_llama_dir)
    qloaded, session = quantized_session(loaded, "int8", "int8")
    params = SamplingParams(temperature=0.0)
    session.prefill("The quick brown fox", params, max_new_tokens=4)
    list(session.play(params))
    assert isinstance(session.trace.cache, Int8KVCache) and qloaded.kv == "int8"
    assert len(session.generated_ids) == 4 and session.trace.cache.length == len(session.prompt_ids) + 3
    plain = Session(loaded)
    plain.prefill("The quick brown fox", params, max_new_tokens=4)
    list(plain.play(params))
    assert session.prompt_ids == plain.prompt_ids and session.model is not plain.model
    fp32_kv = quantized_session(loaded, None, None)[1]
    fp32_kv.prefill("The quick brown fox", params, max_new_tokens=2)
    assert type(fp32_kv.trace.cache).__name__ == "KVCache" and fp32_kv.model is loaded.model
