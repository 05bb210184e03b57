"""Plain records of the quantization lab for the views (`inspector.viz.quant`): dataclasses, no torch.

A `FidelityRecord` is one comparison of a quantized model with the fp32 model, teacher-forced on the
fp32 model's greedy continuation of a prompt (see `inspector.quant.fidelity`); `SchemeStats` one
precision's memory and measured decode speed; `WeightHistogram` one matrix before and after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TopTokens:
    """The most probable next tokens of one distribution, most probable first."""

    ids: list[int]
    pieces: list[str]
    probs: list[float]


@dataclass(frozen=True)
class StepFidelity:
    step: int  # 0 = the token predicted by the prefill
    token_id: int  # the fp32 model's greedy token at this step (what both models are fed next)
    piece: str
    kl: float  # KL(p_fp32 || p_quant) in nats
    top1_agree: bool  # the quantized model's argmax is the fp32 token
    fp32_top: TopTokens
    quant_top: TopTokens


@dataclass(frozen=True)
class LayerFidelity:
    layer: int
    resid_cos_min: float  # cosine of the two residual streams after the block, lowest over the steps
    resid_cos_mean: float


@dataclass(frozen=True)
class FidelityRecord:
    scheme: str  # canonical scheme string, e.g. "int4:32"
    label: str  # e.g. "int4-g32"
    kv: str  # "fp32" | "int8"
    prompt_tokens: int
    steps: list[StepFidelity]
    layers: list[LayerFidelity]
    kl_mean: float
    kl_max: float
    top1_agreement: float
    first_divergence_step: int | None  # first step where free-running greedy output differs; None: never
    weight_bytes: int
    fp32_weight_bytes: int

    @property
    def positions(self) -> int:
        return len(self.steps)

    def summary(self) -> dict[str, Any]:
        """The `inspector quant --json` object."""
        return {"scheme": self.scheme, "kv": self.kv, "weight_bytes": self.weight_bytes,
                "fp32_weight_bytes": self.fp32_weight_bytes, "positions": self.positions,
                "kl_mean": self.kl_mean, "kl_max": self.kl_max, "top1_agreement": self.top1_agreement,
                "first_divergence_step": self.first_divergence_step,
                "layers": [{"layer": x.layer, "resid_cos_min": x.resid_cos_min} for x in self.layers]}


@dataclass(frozen=True)
class SchemeStats:
    """One precision of the selector: weights memory, compute path, measured decode speed."""

    label: str
    weight_bytes: int
    path: str  # how its matmuls run, e.g. "int8 -> fp32 per layer, then fp32 matmul"
    decode_tok_s: float | None = None  # None until measured
    kv: str = "fp32"
    kv_bytes_per_token: int = 0


@dataclass(frozen=True)
class WeightHistogram:
    """Values of one weight matrix before and after quantization, on shared bins."""

    name: str
    label: str  # the scheme
    edges: list[float]  # bins + 1
    before: list[int]
    after: list[int]
    max_abs_err: float
    rms_err: float
    rms_weight: float
    notes: list[str] = field(default_factory=list)


# ---- KV-cache policies: one generation under a policy, the full cache alongside on the same tokens
KEPT_CODES = {0: "not written yet", 1: "kept: recent", 2: "kept: sink", 3: "kept: heavy hitter",
              4: "kept: SnapKV vote", 5: "kept", 6: "evicted"}


@dataclass(frozen=True)
class KVPolicyStep:
    """One generated token under the policy, and the full cache's prediction on the same context."""

    token_id: int
    piece: str
    kl: float  # KL(p_full || p_policy) in nats, same context
    top1_agree: bool
    full_top1_piece: str
    kept_bytes: int
    full_bytes: int


@dataclass
class KVPolicyRun:
    """A generation under a KV-cache policy (`inspector.quant.kv_watch`).

    `kept` (layers, kv_heads, forwards, positions) uint8 codes of `KEPT_CODES` after each forward (forward
    0 is the prefill), `scores` the same shape float32: the policy's score of each kept position (H2O's
    accumulated attention; 0 for every other policy: SnapKV's pooled votes pick what it keeps once, at the
    prefill, and are not recorded)."""

    label: str
    prompt_len: int
    pieces: list[str]  # every position's token piece (prompt, then generated)
    steps: list[KVPolicyStep]
    text: str
    full_text: str  # the full cache's own greedy continuation, for comparison
    kept: Any  # np.ndarray uint8
    scores: Any  # np.ndarray float32
    positions: str = "original"
    finish: str = ""  # why it ended: a `FinishReason` value (`inspector.generation.finish`), set by the Sequence

    @property
    def kl_mean(self) -> float:
        return sum(s.kl for s in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def top1_agreement(self) -> float:
        return sum(s.top1_agree for s in self.steps) / len(self.steps) if self.steps else 1.0


@dataclass
class FlashWalk:
    """One head of one prefill through tiled attention (`inspector.quant.flash_walk`): per tile of keys, the
    running max `m` and sum `l` per query row, this tile's weights exp(s - m) and the output so far."""

    layer: int
    head: int
    pieces: list[str]  # the prompt's token pieces (queries and keys)
    tiles: list[tuple[int, int]]  # (s0, s1) key range of each tile
    m: Any  # np.ndarray (tiles, T) float32
    l: Any  # np.ndarray (tiles, T)
    weights: list[Any]  # per tile (T, s1 - s0) float32
    out_change: Any  # (tiles, T): |output after the tile - output before it| per query row (L2)
    hbm_standard: int  # bytes a GPU kernel would move with the T x S score matrix in HBM (formula)
    hbm_tiled: int  # ... without it (formula)
    ms_standard: float  # measured on this CPU: the layer stack's prefill with the standard attention path
    ms_tiled: float  # ... with the tiled path
