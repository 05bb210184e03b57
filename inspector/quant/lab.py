"""`QuantLab`: the quantization lab over one loaded fp32 model, shared by every caller of a process.

- `model(scheme)`: the quantized model of a scheme, built on first use and kept (process-wide in the app:
  one per scheme, never per browser session; `extra_bytes` says what they hold beyond the fp32 model).
- `compare(prompt_ids, n, scheme, kv) -> FidelityRecord`: the fp32 greedy continuation of n tokens (kept for
  the last prompt, so switching schemes reruns only the quantized side), then the scheme teacher-forced on
  it (`inspector.quant.fidelity`).
- `stats(scheme, kv, measure) -> SchemeStats`: weights bytes, compute path and decode speed, measured once
  per (scheme, kv) over `SPEED_STEPS` greedy decode steps of the generation loop (`loop.greedy`) and kept.
- `inventory(scheme) -> Inventory`: the tensor inventory at that precision (bytes held, precision column).
- `histogram(scheme, name) -> WeightHistogram`: one matrix's values before and after quantization.

Not thread-safe: the app calls it on its model thread only.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from inspector.generation import loop
from inspector.generation.sequence import Sequence
from inspector.quant import fidelity
from inspector.models.inventory import Inventory, build_inventory
from inspector.quant.inventory import quant_inventory
from inspector.quant.kv_int8 import new_kv_cache
from inspector.quant.model import DEFAULT_INT4_PATH, DEFAULT_INT8_PATH, QuantTransformer, quantize_model, weight_bytes
from inspector.quant.measurements import FidelityRecord, SchemeStats, WeightHistogram
from inspector.quant.schemes import Scheme, check_shapes, parse_kv, parse_scheme

SPEED_PROMPT = 16  # prompt tokens before the timed decode steps
SPEED_STEPS = 8  # timed decode steps per (scheme, kv); the median step is reported
HIST_BINS = 60
PATHS = {
    "fp32": "fp32 matmuls (the loaded model)",
    "bf16": "bf16 weights, bf16 matmuls, fp32 activations between them",
    "int8": "aten._weight_int8pack_mm (an int8 weight kernel) on bf16 activations",
    "int4": "aten._weight_int4pack_mm_for_cpu (a packed int4 kernel) on bf16 activations",
}


if DEFAULT_INT8_PATH == "dequant":  # a torch without the int8 kernel
    PATHS["int8"] = "int8 -> fp32 per matrix at each call, fp32 matmul, scale on the outputs"
if DEFAULT_INT4_PATH == "dequant":  # a torch without the int4 kernel
    PATHS["int4"] = "unpack int4 and apply scale+min per group at each call, then an fp32 matmul"


class QuantLab:
    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.fp32_bytes = weight_bytes(loaded.model)
        self._models: dict[str, QuantTransformer] = {}
        self.extra_bytes = 0  # what the models built so far hold beyond the fp32 model (`_own_bytes`, at each build)
        self._speed: dict[tuple[str, str], float] = {}
        self._ref: tuple[tuple, fidelity.Pass] | None = None

    def model(self, scheme: Scheme | str) -> torch.nn.Module:
        scheme = parse_scheme(scheme) if isinstance(scheme, str) else scheme
        if scheme.weights == "fp32":
            return self.loaded.model
        check_shapes(scheme, self.loaded.config)
        if scheme.name not in self._models:
            built = self._models[scheme.name] = quantize_model(self.loaded.model, scheme)
            self.extra_bytes += self._own_bytes(built)
        return self._models[scheme.name]

    def built(self, scheme: Scheme | str) -> bool:
        """True when `scheme`'s model costs nothing more to use: fp32, or already built."""
        scheme = parse_scheme(scheme) if isinstance(scheme, str) else scheme
        return scheme.weights == "fp32" or scheme.name in self._models

    def _own_bytes(self, model: torch.nn.Module) -> int:
        """Bytes `model` holds that the fp32 model does not share (its norm weights and RoPE table are the fp32
        model's). Counted once, when the model is built: the memory cap reads `extra_bytes` before every step."""
        shared = {t.untyped_storage().data_ptr() for t in [*self.loaded.model.parameters(), *self.loaded.model.buffers()]}
        return sum(t.untyped_storage().nbytes() for t in [*model.parameters(), *model.buffers()]
                   if t.numel() and t.untyped_storage().data_ptr() not in shared)

    def reference(self, prompt_ids: list[int], n: int) -> fidelity.Pass:
        key = (tuple(prompt_ids), n)
        if self._ref is None or self._ref[0] != key:
            stop = [self.loaded.tokenizer.eos_id] if self.loaded.tokenizer.eos_id is not None else []
            self._ref = (key, fidelity.reference_pass(self.loaded.model, prompt_ids, n, stop))
        return self._ref[1]

    def compare(self, prompt_ids: list[int], n: int, scheme: str, kv: str | None = None) -> FidelityRecord:
        parsed, kv = parse_scheme(scheme), parse_kv(kv)
        model = self.model(parsed)
        ref = self.reference(prompt_ids, n)
        forced = fidelity.forced_pass(model, prompt_ids, ref.tokens, kv)
        return fidelity.compare(ref, forced, self.loaded.tokenizer.piece, scheme=parsed.name, label=parsed.label,
                                kv=kv, prompt_tokens=len(prompt_ids), weight_bytes=weight_bytes(model),
                                fp32_weight_bytes=self.fp32_bytes)

    @torch.inference_mode()
    def decode_tok_s(self, scheme: str, kv: str = "fp32", n_steps: int = SPEED_STEPS) -> float:
        """Decode tokens per second of a scheme: the median of `n_steps` steps after a short prefill (kept)."""
        parsed, kv = parse_scheme(scheme), parse_kv(kv)
        key = (parsed.name, kv)
        if key not in self._speed:
            model = self.model(parsed)
            seq = Sequence(range(100, 100 + SPEED_PROMPT), n_steps + 1, model.config.max_position_embeddings)
            decoding = loop.greedy(seq, model, new_kv_cache(model, kv))
            next(decoding)  # the prefill, untimed
            times, t0 = [], time.perf_counter()
            for _ in decoding:  # each decode step: its forward and the argmax appended
                times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
            self._speed[key] = 1.0 / float(np.median(times))
        return self._speed[key]

    def measured_tok_s(self, scheme: str, kv: str = "fp32") -> float | None:
        """The decode speed measured so far for (scheme, kv), or None (measures nothing)."""
        return self._speed.get((parse_scheme(scheme).name, parse_kv(kv)))

    def stats(self, scheme: str, kv: str = "fp32", measure: bool = True) -> SchemeStats:
        parsed, kv = parse_scheme(scheme), parse_kv(kv)
        model = self.model(parsed)
        speed = self.decode_tok_s(parsed.name, kv) if measure else self._speed.get((parsed.name, kv))
        kv_bytes = new_kv_cache(model, kv).bytes_per_position
        return SchemeStats(parsed.label, weight_bytes(model), PATHS[parsed.weights], speed, kv, kv_bytes)

    def inventory(self, scheme: str) -> Inventory:
        """The tensor inventory at `scheme`: bytes each tensor holds and its precision."""
        fp32 = build_inventory(self.loaded)
        model = self.model(scheme)
        return fp32 if model is self.loaded.model else quant_inventory(model, fp32)

    def histogram(self, scheme: str, name: str = "model.layers.0.mlp.down_proj.weight") -> WeightHistogram:
        """Values of the matrix `name` (an HF tensor name) before and after quantization, on shared bins."""
        parsed = parse_scheme(scheme)
        before = dict(self.loaded.model.named_parameters())[name].detach().float()
        model = self.model(parsed)
        after = before if parsed.weights == "fp32" else model.quant_modules()[name].dequantize()
        lo, hi = float(before.min()), float(before.max())
        edges = np.linspace(lo, hi, HIST_BINS + 1)
        b, _ = np.histogram(before.numpy(), bins=edges)
        a, _ = np.histogram(after.clamp(lo, hi).numpy(), bins=edges)
        err = (after - before).double()
        return WeightHistogram(name, parsed.label, [float(e) for e in edges], b.tolist(), a.tolist(),
                               float(err.abs().max()), float(err.pow(2).mean().sqrt()),
                               float(before.double().pow(2).mean().sqrt()))
