"""Roofline: the work a forward does (FLOPs, bytes moved) from the config alone, and the machine's two roofs.

`forward_cost(cfg, rows, elem_bytes)` counts one forward of the engine's `Transformer` over a batch whose
row b feeds n_b new tokens after c_b cached positions (`rows = [(n_b, c_b), ...]`), with the logits of
each row's last position only (`step_rows` / `last_only`). Multiply-adds count 2 FLOPs. What is counted:
- FLOPs: every projection (q, k, v, o, gate, up, down) for each of the T = Σ n_b new tokens,
  2 × (linear params per layer) × layers × T (a mixture of experts: its router and the k experts each token
  goes to); attention QKᵀ and PV over the pairs a causal row really
  uses, 4 × heads × head_dim × layers × Σ (n_b c_b + n_b (n_b + 1) / 2); the LM head for one position
  per row, 2 × hidden × vocab × B. Not counted: norms, RoPE, SiLU, softmax, residual adds, biases (each
  O(hidden) per token, under 1% here), and the padding of shorter rows the batched forward also computes.
- Bytes: weights read once per forward (every tensor of `inspector.serving.memory.tensors` except an
  untied embedding, of which only the T rows looked up are read; a mixture of experts reads its shared
  weights and, in each layer, only the experts its tokens went to: `experts_read[l]` distinct experts in
  layer l when the caller measured them (the scheduler does, from the forward's routing), else the expected
  count for uniform routing, E·(1 − (1 − k/E)^T), `inspector.serving.experts`); KV read, every layer's K
  and V of the c_b + n_b positions each row attends to; KV written, the n_b new positions. Activations are not counted
  (at these sizes they stay in the CPU's caches).

Peaks, measured once per machine and cached: `measure_peaks` times a square matmul (GFLOP/s) and a sum
over a tensor far larger than the CPU caches (GB/s of reading) in the model's dtype, best of a few runs.
`cached_peaks(directory, ...)` keeps them in `directory/roofline-peaks.json` (the loader's model directory
is the caller's choice: next to the converted weights), one entry per machine | torch | threads | dtype,
and measures only when the entry is missing, or on `refresh`, which keeps the higher of the old and new
value of each roof (a busy machine only makes a measurement lower).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from inspector.engine.config import ModelConfig
from inspector.engine.kv_cache import kv_bytes
from inspector.serving.experts import expected_experts, expert_costs
from inspector.serving.memory import count_params
from inspector.serving.results import Peaks

PEAKS_FILE = "roofline-peaks.json"


@dataclass(frozen=True)
class ForwardCost:
    flops: int
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int

    @property
    def bytes_moved(self) -> int:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_moved


def linear_params_per_layer(cfg: ModelConfig) -> int:
    """Weights of one layer's projections one token multiplies by: q, k, v, o and the MLP's gate, up, down
    (a mixture of experts: the router and k experts' gate, up, down; no biases, no norms)."""
    D, I, d = cfg.hidden_size, cfg.expert_intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    mlp = D * cfg.num_experts + cfg.num_experts_per_tok * 3 * D * I if cfg.moe else 3 * D * I
    return D * q + 2 * D * kv + q * D + mlp


def weights_read(cfg: ModelConfig, tokens: int, experts_read: Sequence[int] | None = None) -> int:
    """Parameters a forward over `tokens` new tokens reads: all but an untied embedding, plus its looked-up
    rows; of a mixture of experts' experts, `experts_read[l]` per layer l (None: the uniform expectation)."""
    table = cfg.vocab_size * cfg.hidden_size
    params = count_params(cfg) - (0 if cfg.tie_word_embeddings else table) + tokens * cfg.hidden_size
    costs = expert_costs(cfg, "fp32")
    if costs is None:
        return params
    if experts_read is None:
        experts_read = [expected_experts(costs.num_experts, costs.top_k, tokens)] * costs.layers
    return params - costs.expert_params + round(sum(experts_read) * costs.params_per_expert)


def forward_cost(cfg: ModelConfig, rows: Sequence[tuple[int, int]], elem_bytes: int,
                 experts_read: Sequence[int] | None = None) -> ForwardCost:
    """FLOPs and bytes of one forward; rows[b] = (new tokens n_b, cached context c_b); `experts_read`: a
    mixture of experts' distinct experts per layer, when measured. See the module docstring."""
    if not rows:
        return ForwardCost(0, 0, 0, 0)
    L, H, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim
    T = sum(n for n, _ in rows)
    pairs = sum(n * c + n * (n + 1) // 2 for n, c in rows)  # (query, key) pairs under the causal mask
    flops = 2 * linear_params_per_layer(cfg) * L * T + 4 * H * d * L * pairs + 2 * cfg.hidden_size * cfg.vocab_size * len(rows)
    per_position = kv_bytes(cfg, 1, elem_bytes)  # K and V, every layer
    return ForwardCost(flops, weights_read(cfg, T, experts_read) * elem_bytes,
                       sum(n + c for n, c in rows) * per_position, T * per_position)


# ---- the machine's roofs

def machine_key(dtype: torch.dtype, device: torch.device | str = "cpu") -> str:
    """What the peaks depend on: the processor, torch's version, its thread count, the dtype."""
    device = torch.device(device)
    if device.type == "cuda":
        proc = torch.cuda.get_device_name(device)
    else:
        proc = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    proc = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        proc = f"{proc} x{os.cpu_count()}"
    return f"{proc} | torch {torch.__version__} | {torch.get_num_threads()} threads | {str(dtype).removeprefix('torch.')}"


def _best_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm up (allocations, kernel selection)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


@torch.inference_mode()
def measure_peaks(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", *,
                  matmul_n: int = 1024, read_mib: int = 256, repeats: int = 5) -> Peaks:
    """GFLOP/s of an n x n matmul and GB/s of summing `read_mib` MiB, each the best of `repeats` runs."""
    device = torch.device(device)
    a = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    b = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    mm = _best_seconds(lambda: torch.mm(a, b), repeats, device)
    elem = torch.empty((), dtype=dtype).element_size()
    big = torch.ones(read_mib * 2**20 // elem, dtype=dtype, device=device)
    read = _best_seconds(lambda: big.sum(), repeats, device)
    return Peaks(2 * matmul_n**3 / mm / 1e9, big.nbytes / read / 1e9, str(dtype).removeprefix("torch."),
                 machine_key(dtype, device))


def cached_peaks(directory: str | os.PathLike[str], dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", *, refresh: bool = False, **measure_kwargs) -> Peaks:
    """The peaks stored in `directory`/roofline-peaks.json for this machine key, measured and stored if absent.
    `refresh` measures again and keeps the higher of the stored and new value of each roof: a peak is the
    best the machine did, and a measurement taken while it was busy only underestimates it. An unwritable
    directory only costs the caching."""
    path = Path(directory) / PEAKS_FILE
    key = machine_key(dtype, device)
    stored = _stored(path)
    before = stored_peaks(directory, dtype, device)
    if before is not None and not refresh:
        return before
    peaks = measure_peaks(dtype, device, **measure_kwargs)
    if before is not None:
        peaks = Peaks(max(peaks.gflops_per_s, before.gflops_per_s), max(peaks.gb_per_s, before.gb_per_s),
                      peaks.dtype, key)
    stored[key] = {"gflops_per_s": peaks.gflops_per_s, "gb_per_s": peaks.gb_per_s, "dtype": peaks.dtype}
    try:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1), encoding="utf-8")
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        pass
    return peaks


def _stored(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def stored_peaks(directory: str | os.PathLike[str], dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> Peaks | None:
    """The peaks already stored for this machine key in `directory`, or None (nothing is measured)."""
    key = machine_key(dtype, device)
    entry = _stored(Path(directory) / PEAKS_FILE).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return Peaks(float(entry["gflops_per_s"]), float(entry["gb_per_s"]), str(entry["dtype"]), key)
    except (KeyError, TypeError, ValueError):
        return None  # a damaged entry: measured again when asked for


def peaks_directory(weights_path: str | os.PathLike[str]) -> Path:
    """Where a model's peaks are cached: the folder holding its converted weights' directory."""
    return Path(weights_path).resolve().parent
