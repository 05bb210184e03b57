"""Memory calculator: parameter counts against published sizes, weight and KV bytes by hand, GQA vs MHA,
fits-in-memory, the meta-device count against a real built model, transformers' own classes and real
checkpoints, and `inspector memory` (JSON, table, --list, one-line errors). Fast: no real model is loaded
(the two `slow` tests read the real default model's header and build Hugging Face's modules for every
shipped config on the meta device).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.tiny import tiny_llama_dir, tiny_qwen_dir  # noqa: F401  (fixtures)

from inspector.commands.cli import main
from inspector.engine.config import MOE_TYPES
from inspector.errors import InputError, ModelLoadError
from inspector.serving import memory as mem

FIVE_KEYS = ("params", "weight_bytes", "kv_bytes_per_token", "kv_bytes", "total_bytes")


def cfg(name: str):
    return mem.resolve_config(name).config


def expanded(c) -> dict[str, tuple[int, ...]]:
    """The calculator's tensor list: name -> shape."""
    return {t.name: t.shape for t in mem.tensors(c)}


# ---- parameter counts --------------------------------------------------------------------------------------

# Exact counts from independent sources (all quoted in /work/shared/MODEL_CONFIGS.md §2):
EXACT = {
    # measured by loading the repo's own SmolLM2-135M-Instruct (same architecture): MODEL_NOTES.md
    "HuggingFaceTB/SmolLM2-135M": 134_515_008,
    # a third-party test fixture listing Llama 3.1 parameter counts (MODEL_CONFIGS.md §2)
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    "meta-llama/Llama-3.1-70B": 70_553_706_496,
    # the HF API safetensors count for Qwen2.5-7B-Instruct, same architecture as the base (MODEL_CONFIGS.md §2)
    "Qwen/Qwen2.5-7B": 7_615_616_512,
    # keras-hub's presets (keras_hub/src/models/gemma3/gemma3_presets.py, gemma/gemma_presets.py) list each
    # Gemma checkpoint's parameter count
    "google/gemma-3-270m": 268_098_176,
    "google/gemma-3-1b-pt": 999_885_952,
    "google/gemma-2-2b": 2_614_341_888,
    "google/gemma-2-9b": 9_241_705_984,
    # a third-party test asserting transformers' num_parameters() of Qwen/Qwen3-0.6B (model_configs.json)
    "Qwen/Qwen3-0.6B": 596_049_920,
    # a third-party script's count of Phi-3.5-mini, the same architecture as Phi-3-mini-4k (model_configs.json)
    "microsoft/Phi-3-mini-4k-instruct": 3_821_079_552,
}
# Published sizes and their sources. The test allows 1%.
PUBLISHED = {
    # SmolLM2 model card: "135M, 360M, and 1.7B parameters"
    # https://huggingface.co/HuggingFaceTB/SmolLM2-1.7B/blob/4fa12cab4f5f53670b05125fb9d2873af587d231/README.md
    "HuggingFaceTB/SmolLM2-135M": 135e6,
    "HuggingFaceTB/SmolLM2-360M": 360e6,
    "HuggingFaceTB/SmolLM2-1.7B": 1.7e9,
    # Meta's model card: GitHub meta-llama/llama-models models/llama3_1/MODEL_CARD.md (8B, 70B)
    "meta-llama/Llama-3.1-8B": 8e9,
    "meta-llama/Llama-3.1-70B": 70e9,
    # Qwen2.5-7B model card, "Number of Parameters: 7.61B" (https://huggingface.co/QuantFactory/Qwen2.5-7B-GGUF)
    "Qwen/Qwen2.5-7B": 7.61e9,
    # Mistral's announcement, "7.3B" (https://mistral.ai/news/announcing-mistral-7b/, seen only as quoted:
    # unconfirmed). The model card's "7 billion parameters" is a rounded name, 3.5% below the count.
    "mistralai/Mistral-7B-v0.1": 7.3e9,
    # the Gemma and Qwen3 entries publish the counts above (sources in model_configs.json)
    "google/gemma-3-270m": 268_098_176,
    "google/gemma-3-1b-pt": 999_885_952,
    "google/gemma-2-2b": 2_614_341_888,
    "google/gemma-2-9b": 9_241_705_984,
    "Qwen/Qwen3-0.6B": 596_049_920,
    # "a 3.8 billion-parameter ... open model" (xorbitsai/inference's model page for it)
    "microsoft/Phi-3-mini-4k-instruct": 3.8e9,
}


def test_every_published_model_is_shipped_with_its_sources():
    shipped = mem.shipped_configs()
    dense = [s for s in shipped.values() if s.config["model_type"] not in MOE_TYPES]  # MoE: test_moe_memory.py
    assert [s.repo_id for s in dense] == list(PUBLISHED)
    for s in shipped.values():
        assert s.config_sources and all(src.strip() for src in s.config_sources)
    for s in dense:
        assert s.published_source and s.published_params == PUBLISHED[s.repo_id]


@pytest.mark.parametrize("name", list(EXACT))
def test_params_match_exact_published_counts(name):
    assert mem.count_params(cfg(name)) == EXACT[name]


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_params_within_one_percent_of_published_size(name):
    params = mem.count_params(cfg(name))
    assert abs(params / PUBLISHED[name] - 1) < 0.01, (name, params)


def test_qwen_non_embedding_params_match_the_card():
    """Card: "Non-Embedding: 6.53B". The q/k/v biases (Qwen2 has no config key for them) are counted."""
    groups = mem.param_groups(cfg("Qwen/Qwen2.5-7B"), "bf16")
    non_embedding = sum(p for g, (p, _) in groups.items() if g not in ("embedding", "lm_head"))
    assert non_embedding == 6_525_621_760 and round(non_embedding / 1e9, 2) == 6.53
    biases = [t for t in mem.tensors(cfg("Qwen/Qwen2.5-7B")) if t.name.endswith(".bias")]
    assert sorted({t.name.split(".")[-2] for t in biases}) == ["k_proj", "q_proj", "v_proj"]
    assert len(biases) == 3 * 28
    assert not [t for t in mem.tensors(cfg("mistralai/Mistral-7B-v0.1")) if t.name.endswith(".bias")]


def test_tied_embeddings_have_no_lm_head():
    smol, llama = mem.tensors(cfg("HuggingFaceTB/SmolLM2-135M")), mem.tensors(cfg("meta-llama/Llama-3.1-8B"))
    assert "lm_head.weight" not in {t.name for t in smol}
    assert "lm_head.weight" in {t.name for t in llama}
    # untying SmolLM2-135M adds exactly one vocab × hidden matrix
    untied = mem.config_from_hf({**mem.shipped_configs()["huggingfacetb/smollm2-135m"].config,
                                 "tie_word_embeddings": False}, "untied")
    assert mem.count_params(untied) - mem.count_params(cfg("SmolLM2-135M")) == 49152 * 576


# ---- weight bytes ------------------------------------------------------------------------------------------

def test_70b_16bit_weights_are_about_140_gb():
    """The known figure: a 70B model needs about 140 GB in 16-bit (2 bytes × 70.55e9 = 141.1 GB; within 1%)."""
    c = cfg("meta-llama/Llama-3.1-70B")
    for dtype in ("bf16", "fp16", "bfloat16"):
        assert mem.weight_bytes(c, dtype) == 2 * 70_553_706_496
        assert abs(mem.weight_bytes(c, dtype) / 140e9 - 1) < 0.01


def test_weight_bytes_per_precision():
    c = cfg("meta-llama/Llama-3.1-8B")
    n = 8_030_261_248
    vectors = 32 * 2 * 4096 + 4096  # the norm weights: never quantized
    matrices = n - vectors
    assert mem.weight_bytes(c, "fp32") == 4 * n
    # int8/int4: one fp16 scale per 32 weights of a row (every dim here is a multiple of 32), norms in fp16
    assert mem.weight_bytes(c, "int8") == matrices * 34 // 32 + 2 * vectors
    assert mem.weight_bytes(c, "int4") == matrices * 18 // 32 + 2 * vectors
    assert mem.Precision("int4", 4, 32).matrix_bytes(1, 33) == 17 + 2 * 2  # a partial group still has a scale


# ---- KV cache ----------------------------------------------------------------------------------------------

def test_kv_bytes_per_token_by_hand():
    # Llama 3.1 8B: 2 (K, V) × 32 layers × 8 KV heads × 128 head_dim × 2 bytes = 131,072 bytes per token
    c = cfg("meta-llama/Llama-3.1-8B")
    assert mem.kv_bytes_per_token(c, "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert mem.kv_bytes_per_token(c, "fp32") == 262_144 and mem.kv_bytes_per_token(c, "fp8") == 65_536
    assert mem.kv_bytes(c, 8192, 4, "bf16") == 131_072 * 8192 * 4  # = 4 GiB
    # SmolLM2-135M, the repo's model: 2 × 30 × 3 × 64 × 2 = 23,040
    assert mem.kv_bytes_per_token(cfg("HuggingFaceTB/SmolLM2-135M")) == 23_040


@pytest.mark.parametrize("name, ratio", [("meta-llama/Llama-3.1-70B", 8), ("Qwen/Qwen2.5-7B", 7),
                                         ("HuggingFaceTB/SmolLM2-135M", 3), ("HuggingFaceTB/SmolLM2-1.7B", 1)])
def test_gqa_saves_heads_over_kv_heads_against_full_mha(name, ratio):
    c = cfg(name)
    mha = mem.with_full_mha(c)
    assert mha.num_key_value_heads == c.num_attention_heads and c.num_attention_heads // c.num_key_value_heads == ratio
    assert mem.kv_bytes_per_token(mha) == ratio * mem.kv_bytes_per_token(c)
    # the MHA model also has larger k/v projections: 2 × layers × hidden × (heads − kv_heads) × head_dim more
    extra = 2 * c.num_hidden_layers * c.hidden_size * (c.num_attention_heads - c.num_key_value_heads) * c.head_dim
    extra += 2 * c.num_hidden_layers * (c.num_attention_heads - c.num_key_value_heads) * c.head_dim * c.qkv_bias
    assert mem.count_params(mha) - mem.count_params(c) == extra


def test_requests_that_fit():
    c = cfg("meta-llama/Llama-3.1-8B")
    est = mem.estimate(c, context=8192, batch=1, dtype="bf16", memory_bytes=80 * 2**30)
    per_request = 131_072 * 8192  # 1 GiB
    assert est.fits_requests == (80 * 2**30 - 2 * 8_030_261_248) // per_request == 65
    mha = mem.estimate(mem.with_full_mha(c), context=8192, dtype="bf16", memory_bytes=80 * 2**30)
    assert mha.fits_requests == (80 * 2**30 - mha.weight_bytes) // (4 * per_request) == 15
    # weights larger than the memory: nothing fits, never a negative count
    assert mem.estimate(cfg("meta-llama/Llama-3.1-70B"), 8192, memory_bytes=80 * 10**9).fits_requests == 0
    assert mem.requests_that_fit(100, 40, 10, 3) == 2


def test_estimate_totals_and_default_kv_dtype():
    c = cfg("Qwen/Qwen2.5-7B")
    est = mem.estimate(c, context=4096, batch=2, dtype="int4")
    assert est.total_bytes == est.weight_bytes + est.kv_bytes
    assert est.kv_bytes_per_token == 57_344  # weight-only int4 keeps the cache in bf16
    assert mem.estimate(c, 4096, dtype="fp32").kv_bytes_per_token == 2 * 57_344


@pytest.mark.parametrize("kwargs, message", [
    (dict(context=0, batch=1), "context must be a positive integer"),
    (dict(context=-5, batch=1), "context must be a positive integer"),
    (dict(context=8, batch=0), "batch must be a positive integer"),
    (dict(context=8, dtype="int3"), "unknown dtype 'int3'"),
    (dict(context=8, kv_dtype="int4"), "unknown KV dtype 'int4'"),
])
def test_estimate_refuses_bad_input(kwargs, message):
    with pytest.raises(InputError, match=message):
        mem.estimate(cfg("SmolLM2-135M"), **kwargs)


# ---- the tensor list against real checkpoints and the engine -----------------------------------------------

def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:  # reads the header only
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen_dir"])
def test_tensors_equal_a_transformers_checkpoint(fixture, request):
    """A model directory written by transformers' save_pretrained (tied Llama; untied Qwen2 with biases)."""
    directory = request.getfixturevalue(fixture)
    rc = mem.resolve_config(str(directory))
    assert rc.source == str(directory / "config.json")
    assert expanded(rc.config) == safetensors_shapes(directory / "model.safetensors")


TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)


FAMILY_KEYS = {"qwen3": {"head_dim": 16}, "mistral": {"sliding_window": 8},
               "gemma2": {"head_dim": 16, "sliding_window": 8}, "gemma3_text": {"head_dim": 16, "sliding_window": 8},
               "phi3": {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}}


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3_text"])
@pytest.mark.parametrize("tie", [True, False])
def test_meta_count_equals_a_real_model_and_transformers(model_type, tie):
    """The count read off the meta-device model equals sum(numel) of the same engine model built for real
    (random weights, fp32 and bf16 bytes), and of transformers' own class built from the same config."""
    import torch
    import transformers

    from inspector.engine.model import Transformer

    from tests.support.tiny import HF_CLASSES

    raw = {**TINY, "model_type": model_type, "tie_word_embeddings": tie, **FAMILY_KEYS.get(model_type, {})}
    c = mem.config_from_hf(raw, f"tiny-{model_type}")
    real = Transformer(c)
    assert mem.count_params(c) == sum(p.numel() for p in real.parameters())
    assert expanded(c) == {k: tuple(p.shape) for k, p in real.named_parameters()}
    assert mem.weight_bytes(c, "fp32") == sum(p.nbytes for p in real.parameters())
    assert mem.weight_bytes(c, "bf16") == sum(p.nbytes for p in real.to(torch.bfloat16).parameters())

    hf_config, hf_class = (getattr(transformers, n) for n in HF_CLASSES[model_type])
    keys = {k: v for k, v in raw.items() if k != "model_type"}
    with torch.device("meta"):
        hf = hf_class(hf_config(**keys))
    assert mem.count_params(c) == sum(p.numel() for p in hf.parameters())  # a tied head is one parameter
    assert expanded(c) == {k: tuple(p.shape) for k, p in hf.named_parameters()}
    assert (c.qkv_bias, "lm_head.weight" in expanded(c)) == (model_type == "qwen2", not tie)


def test_every_shipped_config_builds_on_the_meta_device():
    """No shipped entry needs a formula path: each one is the engine's model of its own family."""
    for s in mem.shipped_configs().values():
        rc = mem.resolve_config(s.repo_id)
        assert mem.count_params(rc.config) > 0
        assert rc.layout_note is None and rc.config.model_type == s.config["model_type"], s.repo_id


@pytest.mark.slow
def test_the_repo_default_model_has_134_515_008_params():
    """The real SmolLM2-135M-Instruct the app runs: its config.json and its weights' header."""
    from inspector.models.catalog import DEFAULT_KEY, resolve_named

    directory = resolve_named(DEFAULT_KEY).directory
    c = mem.resolve_config(str(directory)).config
    assert mem.count_params(c) == 134_515_008
    assert expanded(c) == safetensors_shapes(directory / "model.safetensors")


@pytest.mark.slow
def test_counts_equal_hugging_face_modules_for_every_shipped_config():
    """transformers' own Llama/Qwen2/Mistral classes built on the meta device (1 and 2 layers, extrapolated)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    def hf_params(raw: dict, layers: int) -> int:
        keys = {k: v for k, v in raw.items() if k != "model_type"}
        config = transformers.AutoConfig.for_model(raw["model_type"], **{**keys, "num_hidden_layers": layers})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        return sum(p.numel() for p in model.parameters())

    for s in mem.shipped_configs().values():
        one, two = hf_params(s.config, 1), hf_params(s.config, 2)
        layers = s.config["num_hidden_layers"]
        assert one + (layers - 1) * (two - one) == mem.count_params(cfg(s.repo_id)), s.repo_id


# ---- configurations ----------------------------------------------------------------------------------------

def test_names_are_case_insensitive_and_the_short_name_works():
    for name in ("meta-llama/Llama-3.1-70B", "META-LLAMA/llama-3.1-70b", "Llama-3.1-70B"):
        assert mem.resolve_config(name).name == "meta-llama/Llama-3.1-70B"


def test_windowed_kv_counts_each_sliding_layer_at_its_window():
    """Gemma 3 270M: 15 of 18 layers slide (window 512); a cache keeping only their window, by hand."""
    c = cfg("google/gemma-3-270m")
    per_layer_token = 2 * 1 * 256 * 2  # K and V, 1 KV head, head_dim 256, bf16
    assert mem.kv_bytes_per_token(c) == 18 * per_layer_token
    assert [c.layer_type(i) for i in range(18)].count("sliding_attention") == 15
    assert mem.windowed_kv_bytes(c, 8192, 2) == per_layer_token * (15 * 512 + 3 * 8192) * 2
    assert mem.windowed_kv_bytes(c, 300, 1) == mem.kv_bytes(c, 300, 1)  # shorter than the window: the same
    g2 = cfg("google/gemma-2-2b")  # alternating: 13 local, 13 global
    assert mem.windowed_kv_bytes(g2, 8192, 1) == mem.kv_bytes_per_token(g2) // 26 * (13 * 4096 + 13 * 8192)
    assert mem.windowed_kv_bytes(cfg("Qwen/Qwen3-0.6B"), 8192, 1) is None  # no sliding layer
    phi = cfg("microsoft/Phi-3-mini-4k-instruct")  # every layer slides
    assert mem.windowed_kv_bytes(phi, 4096, 1) == mem.kv_bytes_per_token(phi) * 2047


def test_mistral_reads_as_mistral_and_keeps_its_sliding_window():
    rc = mem.resolve_config("mistralai/Mistral-7B-v0.1")
    assert rc.config.model_type == "mistral" and not rc.config.qkv_bias and rc.sliding_window == 4096
    assert rc.config.sliding_window == 4096


def test_rope_and_activation_keys_do_not_matter_to_the_count(tmp_path):
    raw = {**mem.shipped_configs()["meta-llama/llama-3.1-8b"].config,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "hidden_act": "gelu"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert mem.count_params(mem.resolve_config(str(tmp_path)).config) == 8_030_261_248


def test_data_file_is_package_data():
    """model_configs.json is read through importlib.resources, so it must ship in the wheel (pyproject)."""
    import importlib.resources as resources
    import tomllib

    assert json.loads(resources.files("inspector.serving").joinpath("model_configs.json").read_text())["models"]
    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    assert "model_configs.json" in pyproject["tool"]["setuptools"]["package-data"]["inspector.serving"]


# ---- CLI ---------------------------------------------------------------------------------------------------

def test_cli_json_keys_and_values(capsys):
    args = ["memory", "--config", "meta-llama/Llama-3.1-70B", "--context", "8192", "--batch", "4",
            "--dtype", "bf16", "--memory", "80GB", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(FIVE_KEYS) <= out.keys()
    assert out["params"] == 70_553_706_496 and out["weight_bytes"] == 141_107_412_992
    assert out["kv_bytes_per_token"] == 327_680 and out["kv_bytes"] == 327_680 * 8192 * 4
    assert out["total_bytes"] == out["weight_bytes"] + out["kv_bytes"]
    assert set(FIVE_KEYS) <= out["mha"].keys() and out["mha"]["kv_bytes_per_token"] == 8 * 327_680
    assert out["fits_requests"] == 0 and out["memory_bytes"] == 80 * 10**9
    assert sum(g["params"] for g in out["params_by_group"].values()) == out["params"]
    assert out["layout_note"] is None


def test_cli_defaults_context_to_the_models_window_and_dtype_to_torch_dtype(capsys):
    assert main(["memory", "--config", "Qwen/Qwen2.5-7B", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context"] == 131_072 and out["batch"] == 1 and out["dtype"] == "bf16" and out["kv_dtype"] == "bf16"


def test_cli_table(capsys):
    assert main(["memory", "--config", "mistralai/Mistral-7B-v0.1", "--context", "4096", "--memory", "24GB"]) == 0
    out = capsys.readouterr().out
    assert "7,241,732,096" in out and "GQA (8 KV heads)" in out and "MHA (32 KV heads)" in out
    assert "131,072 B" in out and "requests that fit in 22.4 GiB" in out and "sliding_window 4,096" in out
    assert "note: model_type" not in out  # the engine builds Mistral as itself


def test_cli_list(capsys):
    assert main(["memory", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PUBLISHED) and "70,553,706,496" in out
    assert main(["memory", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["repo_id"] for r in rows] == [s.repo_id for s in mem.shipped_configs().values()]
    assert set(PUBLISHED) <= {r["repo_id"] for r in rows} and all(r["config_sources"] for r in rows)


def test_cli_reads_a_config_path(tiny_llama_dir, capsys):
    for arg in (str(tiny_llama_dir), str(tiny_llama_dir / "config.json")):
        assert main(["memory", "--config", arg, "--context", "16", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["params"] == sum(map(_numel, safetensors_shapes(tiny_llama_dir / "model.safetensors").values()))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@pytest.mark.parametrize("args, message", [
    (["--config", "llama-3.1-70"], "unknown config 'llama-3.1-70'; did you mean meta-llama/Llama-3.1-70B"),
    (["--config", "gpt-5"], "unknown config 'gpt-5'"),
    (["--config", "Llama-3.1-8B", "--dtype", "int3"], "unknown dtype 'int3'; choose one of fp32, bf16"),
    (["--config", "Llama-3.1-8B", "--kv-dtype", "q4"], "unknown KV dtype 'q4'"),
    (["--config", "/no/such/config.json"], "no such file or directory: /no/such/config.json"),
    (["--config", "x" * 5000], "unknown config 'xxx"),  # too long to be a path: no OSError
    ([], "memory needs --config"),
])
def test_cli_bad_input_is_one_line(args, message, capsys):
    assert main(["memory", *args]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], captured.err
    assert len(lines[0]) < 400


@pytest.mark.parametrize("args, message", [
    (["--context", "0"], "context must be a whole number >= 1, got '0'"),
    (["--context", "-5"], "context must be a whole number >= 1, got '-5'"),
    (["--context", "lots"], "context must be a whole number >= 1, got 'lots'"),
    (["--batch", "0"], "batch must be a whole number >= 1, got '0'"),
    (["--memory", "lots"], "memory must be a number > 0 of bytes with a unit, such as 80GB or 80GiB"),
    (["--memory", "1e400"], "got '1e400'"),
    (["--memory", "0GB"], "got '0GB'"),
    (["--memory", "1e308TB"], "got '1e308TB'"),  # finite, but past the double range in bytes
])
def test_cli_bad_number_is_a_usage_error(args, message, capsys):
    """A number out of range is refused as its flag is parsed (exit 2), before any config is read."""
    with pytest.raises(SystemExit) as exit_:
        main(["memory", "--config", "Llama-3.1-8B", *args])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: inspector memory: argument --") and message in lines[0]


@pytest.mark.parametrize("content, message", [
    ('{"hidden_size": 64,', "cannot parse"),
    (b"\xff\xfe", "cannot parse"),
    ("[1, 2]", "must hold a JSON object"),
    ('{"model_type": "gemma", "hidden_size": 8}', "model_type 'gemma'"),
    ('{"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1}',
     "lacks the key 'num_attention_heads'"),
    ('{"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 0}',
     "num_attention_heads must be a positive integer"),
    ('{"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 4,'
     ' "num_key_value_heads": 3}', "num_key_value_heads=3"),
    ('{"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 4,'
     ' "mlp_bias": true}', "mlp_bias=True"),
])
def test_cli_bad_config_file_is_one_line(content, message, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["memory", "--config", str(path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_cli_directory_without_config_is_one_line(tmp_path, capsys):
    assert main(["memory", "--config", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == f"error: {tmp_path} has no config.json"


def test_resolve_errors_are_inspector_errors():
    with pytest.raises(ModelLoadError):
        mem.resolve_config("/no/such/dir/config.json")
    with pytest.raises(InputError, match="did you mean Qwen/Qwen2.5-7B"):
        mem.resolve_config("qwen2.5")
