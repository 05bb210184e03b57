"""What the engine records for the UI, CLI and tests: small, deep-copyable, numpy/plain-Python only.

One `ForwardRecord` per forward pass: the prefill (step 0, all prompt tokens at once) and each decode
step k (one token). Arrays hold the positions this forward *added*; the residual heatmap concatenates
records along positions. Full attention maps are never stored: the trace store computes any attention
row on demand from a forward's queries and the cached keys (`inspector.session.trace_store`).
`commitment_layer(top1)` reads a logit lens's top-1 ids: the layer from which the final token stays on top;
`lens_commitment(rec)` is that layer and the final top-1 of a record, from its lens or found without it.
A mixture-of-experts model's forwards also keep their routing (`RoutingRecord`: every layer's chosen experts,
their weights and the router's distribution, per position added); a dense model's have `routing` None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inspector.engine.config import SamplingParams


@dataclass
class TopToken:
    """One candidate token: id, display piece, raw logit and probability (softmax of raw logits)."""

    id: int
    piece: str
    logit: float
    prob: float


@dataclass
class Candidate:
    """A top-N token (ranked by raw logit) followed through the sampling stages."""

    id: int
    piece: str
    logit: float
    prob_raw: float  # softmax(logits)
    prob_temperature: float  # softmax(logits / T); equals prob_raw when T == 0 (greedy)
    kept_top_k: bool
    kept_top_p: bool
    kept_min_p: bool
    prob_final: float  # renormalised over the survivors (0 when removed)
    stage_probs: list[float] = field(default_factory=list)  # after each stage of SampleRecord.stages, in order
    prob_precap: float | None = None  # softmax of the logits before the final soft-cap (SampleRecord.softcap)


@dataclass
class StageStat:
    """What one processor did to the distribution: counted over the whole vocabulary."""

    name: str
    allowed: int  # tokens with non-zero probability after it
    removed: int  # tokens it took to probability 0
    moved: int  # tokens still allowed whose logit it changed
    mass_removed: float  # probability (just before it) of the tokens it removed
    top_before: list[TopToken] = field(default_factory=list)  # most likely just before it (prob before)
    top_after: list[TopToken] = field(default_factory=list)  # most likely after it (prob after)


@dataclass
class SampleRecord:
    params: SamplingParams
    token_id: int
    token_piece: str
    candidates: list[Candidate]  # top 20 by raw logit, the chosen token always included
    entropy_raw: float  # nats, of softmax(logits)
    entropy_final: float  # nats, of the final (filtered, renormalised) distribution
    survivors: int  # tokens with non-zero final probability
    vocab_size: int
    stages: list[str] = field(default_factory=list)  # the logits processors the draw ran, in order
    stage_stats: list[StageStat] = field(default_factory=list)  # one per stage, in order
    # The model's own last stage before the chain, in a family with a final logit soft-cap (Gemma 2): its
    # cap, and what cap * tanh(x / cap) did to the distribution (top before: of the logits before the cap).
    # `prob_raw` and `logit` stay those of the capped logits, the ones the chain reads.
    softcap: float | None = None
    softcap_stat: StageStat | None = None

    # A record may be made deferred (`inspector.session.sample_records.sample_record`): its token and params
    # set, the rest (candidates, entropies, survivors, stage_stats) built by `_fill(self)` when one is first
    # read. __getattr__ runs only for an attribute not set yet, so a filled record costs nothing more.
    def __getattr__(self, name: str) -> object:
        fill = self.__dict__.pop("_fill", None)
        if fill is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        fill(self)
        return getattr(self, name)

    def __getstate__(self) -> dict:
        """Copies and pickles carry the built fields, never the deferred builder."""
        fill = self.__dict__.pop("_fill", None)
        if fill is not None:
            fill(self)
        return dict(self.__dict__)


@dataclass
class KVLayerStat:
    """One layer's KV cache after a forward. K and V shapes are (batch, kv_heads, length, head_dim)."""

    layer: int
    length: int  # cached positions (entries)
    capacity: int  # positions allocated
    nbytes: int  # bytes of K plus V in use (length entries), as the cache measures them
    k_shape: tuple[int, int, int, int]
    v_shape: tuple[int, int, int, int]
    kv_head_groups: list[list[int]]  # kv head j -> the query heads that read it
    position_bytes: int = 0  # what one position costs in every layer (the cache's `kv_bytes`); 0 in old files


@dataclass
class RoutingRecord:
    """One forward's routing in a mixture-of-experts model: every layer, the positions the forward added
    (`inspector.engine.moe`; n = ForwardRecord.n_new, k experts per token out of E)."""

    expert_ids: np.ndarray  # (num_layers, n, k) int32: the experts each position went to, highest weight first
    expert_weights: np.ndarray  # (num_layers, n, k) float32: their weights in the position's mixture
    router_probs: np.ndarray  # (num_layers, n, E): softmax of the router logits (float16 for 512+ positions)

    @property
    def num_experts(self) -> int:
        return int(self.router_probs.shape[-1])

    @property
    def top_k(self) -> int:
        return int(self.expert_ids.shape[-1])

    @classmethod
    def of(cls, arrays: dict[str, np.ndarray] | None) -> "RoutingRecord | None":
        """From a recorder's `routing_arrays()` (None for a dense model)."""
        return None if arrays is None else cls(**arrays)


@dataclass
class ForwardRecord:
    kind: str  # "prefill" | "decode"
    step: int  # 0 = prefill, k = the k-th decode step
    start_pos: int  # position of the first token this forward added
    token_ids: list[int]  # the tokens fed in (prefill: the prompt; decode: the previously sampled token)
    cached: bool  # False when the step ran without the KV cache (recompute over the full sequence)
    # L2 norms, shape (num_layers, n_new) float32, n_new = len(token_ids):
    resid_pre: np.ndarray
    attn_out: np.ndarray
    resid_mid: np.ndarray
    mlp_out: np.ndarray
    resid_post: np.ndarray
    logit_lens: list[list[TopToken]]  # per layer: top-5 of the last position's residual -> final norm -> LM head
    logits: np.ndarray  # (vocab,) float16, the last position's logits (the real ones)
    kv: list[KVLayerStat]  # per layer, after this forward
    forward_ms: float
    sample: SampleRecord | None = None  # the token sampled from `logits`
    sample_ms: float = 0.0
    tokenize_ms: float = 0.0  # prefill only
    extra: dict = field(default_factory=dict)
    # Families with post-norms (Gemma): the L2 norms of what attention and the MLP made before their post-norm,
    # (num_layers, n_new) like attn_out / mlp_out (which are after it); None for other families.
    attn_out_raw: np.ndarray | None = None
    mlp_out_raw: np.ndarray | None = None
    # [commitment layer, the final top-1 id] of the logit lens, found without the whole lens (the chips' badge)
    commitment: list[int] | None = None
    routing: RoutingRecord | None = None  # a mixture of experts' routing; None for a dense model

    @property
    def n_new(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> range:
        return range(self.start_pos, self.start_pos + self.n_new)


@dataclass
class FamilyCard:
    """What a model's family adds to a Llama block, for the views: its name, the additions, and its layers'
    kinds (sliding-window "local" or "global") with the window and RoPE bases."""

    model: str
    model_type: str
    features: list[str]
    layer_kinds: list[str]  # "global" or "local" per layer
    window: int | None
    rope_theta: float
    rope_local_theta: float | None
    final_softcap: float | None  # the Sampling view shows logits before and after it


@dataclass
class NextTokens:
    """One model's view of a prompt: its tokenization and its next-token distribution (top entries)."""

    model: str
    pieces: list[str]
    ids: list[int]
    top: list[TopToken]
    forward_ms: float


@dataclass
class OpRow:
    """One operation of a timed forward: where (a layer, or None outside the blocks), what, and its cost."""

    layer: int | None
    op: str  # qkv, attention, o (post-norm), gate/up, down (post-norm), norms, LM head, sampling, ...
    seconds: float
    bytes_read: int  # weights, K/V and activations it reads (`inspector.engine.optiming`)
    flops: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflops_per_s(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def intensity(self) -> float:
        """FLOPs per byte read: where the operation sits on a roofline."""
        return self.flops / self.bytes_read if self.bytes_read else 0.0


@dataclass
class OpTiming:
    """A step's forward run again with a timer at every trace point (median per operation over `repeats`)."""

    step: int
    kind: str  # "prefill" | "decode"
    tokens: int  # positions the forward added
    context: int  # cached positions before it
    device: str
    dtype: str
    repeats: int
    rows: list[OpRow]  # per layer and operation, in the order the forward ran them
    totals: list[OpRow]  # per operation, summed over the layers

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.totals)


def lens_commitment(rec: ForwardRecord) -> list[int] | None:
    """A record's [commitment layer, final top-1 id]: from its whole logit lens when that was computed, else
    the one found without it (`ForwardRecord.commitment`), else None."""
    if rec.logit_lens and all(rec.logit_lens):
        top1 = [tops[0].id for tops in rec.logit_lens]
        return [commitment_layer(top1), top1[-1]]
    return rec.commitment


def commitment_layer(top1: list[int]) -> int:
    """The first layer L with top1[L:] all equal to top1[-1] (the final prediction)."""
    if not top1:
        raise ValueError("no layers")
    L = len(top1) - 1
    while L > 0 and top1[L - 1] == top1[-1]:
        L -= 1
    return L
