"""Safetensors weights of an HF-format directory -> a state dict, memory-mapped; and loading it into a model.

`weight_files(dir)` finds the files (a single model.safetensors, any *.safetensors, or the shards a
`model.safetensors.index.json` names). `read_state_dict(dir)` returns tensors backed by the mapped files
(no copy). `load_weights(model, state_dict, config, dtype)` assigns them with `strict=True`, so a missing or
unexpected tensor is an error naming it. Only safetensors are read here: never pickle (`.bin`, `.pt`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from inspector.engine.config import ModelConfig
from inspector.errors import ModelLoadError

INDEX_FILE = "model.safetensors.index.json"
# Keys some checkpoints carry that hold no learned weights (old Llama exports save RoPE's inv_freq).
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files holding the model's weights; a clear error when there are none."""
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot read {index}: {type(exc).__name__}: {exc}") from None
        files = [directory / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelLoadError(f"{directory}: shard(s) named in {INDEX_FILE} are missing: {', '.join(missing)}")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
    if pickles:
        raise ModelLoadError(
            f"only safetensors and GGUF are read; {directory} has only {', '.join(pickles)} "
            "(pickle files can run code when loaded; convert them to safetensors first)"
        )
    raise ModelLoadError(f"no *.safetensors weights in {directory}")


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of the directory's safetensors files, memory-mapped (zero-copy where the file allows)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in weight_files(directory):
        try:
            part = load_file(str(path))
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelLoadError(f"cannot read {path}: truncated or corrupted safetensors file ({msg})") from None
        dup = state.keys() & part.keys()
        if dup:
            raise ModelLoadError(f"{path}: tensor {sorted(dup)[0]} also appears in another shard")
        state.update(part)
    return state


def file_dtype(state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype most of the parameters are stored in."""
    counts: dict[torch.dtype, int] = {}
    for t in state.values():
        counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.get) if counts else torch.float32


def prepare_state_dict(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Drop non-weight keys and a tied model's redundant lm_head.weight, so `strict=True` can hold."""
    out = {k: v for k, v in state.items() if not k.endswith(_IGNORED_SUFFIXES)}
    if config.tie_word_embeddings and "lm_head.weight" in out:
        del out["lm_head.weight"]  # some exports save the tied matrix twice
    return out


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
    """Assign `state` (cast to `dtype`; no copy when already in it) to `model` with strict key checking."""
    state = {k: (v if v.dtype == dtype else v.to(dtype)) for k, v in state.items()}
    expected = set(model.state_dict().keys())
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s), e.g. {missing[0]}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensor(s), e.g. {unexpected[0]}")
        raise ModelLoadError("weights do not match the config: " + "; ".join(parts))
    own = model.state_dict()
    for k, v in state.items():
        if own[k].shape != v.shape:
            raise ModelLoadError(f"weights do not match the config: {k} has shape {tuple(v.shape)}, "
                                 f"config implies {tuple(own[k].shape)}")
    model.load_state_dict(state, strict=True, assign=True)
