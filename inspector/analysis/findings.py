"""What the analyses return to the UI, the CLI and the viz: plain Python data, no torch.

`PatchSweep`: the normalized logit difference recovered, (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt),
per layer and position, LD = logit(answer) - logit(wrong) at the last position. `PatchedRun`: one
patched point's score, next tokens and greedy continuation.
`Attribution`: the parts of one token's logit (embedding, every head, every o_proj bias, every MLP, and
what interventions added) through the final norm with its scale frozen at this position (and Gemma's
post-attention norms with theirs; Granite's multipliers and logits scaling inside the parts, `multipliers`);
they sum to `logit_precap`, the logit before a final soft-cap (`logit` itself without one), up to fp32
rounding. `decomposed()`, `condition()` and `cap_note()` say so in words for the views.
`Comparison`: two branches of one prompt step by step.
`TokenLosses`, `TrainingStep`: a text teacher-forced (per-token cross-entropy, perplexity) and one backward
pass over it (gradient norms per weight and per layer, memory of inference beside a training step, each
part `MemoryPart` labelled measured or formula).
`commitment_layer(top1)`: the first layer from which the logit lens's top-1 stays the final top-1 (defined
beside the records it reads, `inspector.session.records`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inspector.session.records import commitment_layer  # noqa: F401  (re-exported: read with these records)


@dataclass
class PatchSweep:
    point: str  # resid_pre | attn_out | mlp_out
    layers: list[int]
    positions: list[int]
    pieces: list[str]  # the clean prompt's pieces, by position
    corrupt_pieces: list[str]
    matrix: list[list[float]]  # [layer][position]: normalized logit difference recovered
    clean_logit_diff: float
    corrupt_logit_diff: float
    answer_id: int
    wrong_id: int
    seconds: float
    batched: bool = True

    def to_json(self) -> dict:
        return {"point": self.point, "layers": self.layers, "positions": self.positions, "matrix": self.matrix,
                "clean_logit_diff": self.clean_logit_diff, "corrupt_logit_diff": self.corrupt_logit_diff,
                "seconds": self.seconds, "answer_id": self.answer_id, "wrong_id": self.wrong_id,
                "pieces": self.pieces, "corrupt_pieces": self.corrupt_pieces}


@dataclass
class PatchedRun:
    """The corrupted prompt run with one patch (`inspector.analysis.patching.patched_run`): what it recovered,
    its next-token distribution's top tokens and its greedy continuation."""
    label: str  # the patch, e.g. "patched resid_pre at layer 3, position 2"
    layer: int
    position: int
    recovered: float  # normalized logit difference recovered (as a sweep cell)
    top_ids: list[int]  # the next token's most probable ids, most probable first
    top_pieces: list[str]
    top_probs: list[float]
    continuation_ids: list[int]  # greedy tokens after the patched prompt
    continuation_text: str


@dataclass
class LayerParts:
    heads: list[float]  # each head's output through o_proj (and a post-attention norm's frozen scale)
    mlp: float  # what the MLP added to the residual stream
    attn_rest: float = 0.0  # attention output beyond its heads and bias: what an edit of it added
    attn_bias: float = 0.0  # o_proj's bias (0 without one)


@dataclass
class Attribution:
    token_id: int
    piece: str
    logit: float  # what the model samples from (after the final soft-cap, when the family has one)
    embed: float
    layers: list[LayerParts]
    other: float = 0.0  # what interventions added to the residual stream itself (steering)
    labels: list[str] = field(default_factory=list)  # the interventions the run had
    softcap: float | None = None  # the final soft-cap c (Gemma 2): logit = c * tanh(logit_precap / c)
    logit_precap: float | None = None  # the logit before the soft-cap; None without one (then `logit`)
    final_rms: float = 1.0  # the final norm's frozen scale: rms of the residual stream at this position
    post_rms: list[float] | None = None  # per layer, the post-attention norm's frozen rms (Gemma); else None
    # Granite's constants every part includes: embedding_multiplier, residual_multiplier, logits_scaling
    multipliers: dict[str, float] | None = None

    @property
    def explained(self) -> float:
        """The logit the parts sum to: before the soft-cap when there is one."""
        return self.logit if self.logit_precap is None else self.logit_precap

    @property
    def total(self) -> float:
        return self.embed + self.other + sum(sum(lp.heads) + lp.mlp + lp.attn_rest + lp.attn_bias
                                             for lp in self.layers)

    def decomposed(self) -> str:
        """What the parts sum to, in words: "logit", or "pre-cap logit" with a final soft-cap."""
        return "logit" if self.softcap is None else "pre-cap logit"

    def condition(self) -> str:
        """Why the parts add up and what a part is, in one sentence."""
        frozen = ("the final norm's and each post-attention norm's scale (1/rms) frozen at this position's values"
                  if self.post_rms else "the final norm's scale (1/rms) frozen at this position's value")
        return (f"With {frozen}{self.multipliers_note()}, each part is what it wrote to the residual stream read "
                "through a fixed linear map, so the parts add up; a part is not what removing it would change")

    def multipliers_note(self) -> str:
        """Granite's constants as the parts include them ("" for a model without them)."""
        if not self.multipliers:
            return ""
        m = self.multipliers
        return (f" and the model's own multipliers inside the parts (the embedding ×{m['embedding_multiplier']:g}, "
                f"each attention and MLP output ×{m['residual_multiplier']:g} before the residual adds it, the "
                f"logit ÷{m['logits_scaling']:g})")

    def cap_note(self) -> str:
        """How the model's logit follows from the pre-cap one, with this run's numbers ("" without a cap)."""
        if self.softcap is None:
            return ""
        c = f"{self.softcap:g}"
        return f"the model's logit is {c}·tanh({self.explained:.3f} / {c}) = {self.logit:.3f}"

    def ranked(self) -> list[tuple[str, float]]:
        """Every part as (name, value), largest magnitude first: "embed", "head L.H", "mlp L", ..."""
        parts = [("embed", self.embed)]
        for i, lp in enumerate(self.layers):
            parts += [(f"head {i}.{h}", v) for h, v in enumerate(lp.heads)] + [(f"mlp {i}", lp.mlp)]
            if lp.attn_bias != 0.0:
                parts.append((f"attn {i} bias", lp.attn_bias))
            if abs(lp.attn_rest) > 1e-6:
                parts.append((f"attn {i} other", lp.attn_rest))
        if abs(self.other) > 1e-6:
            parts.append(("residual edits", self.other))
        return sorted(parts, key=lambda kv: -abs(kv[1]))

    def to_json(self) -> dict:
        return {"token_id": self.token_id, "piece": self.piece, "logit": self.logit,
                "logit_precap": self.explained, "softcap": self.softcap, "decomposes": self.decomposed(),
                "frozen_scales": {"final_norm_rms": self.final_rms, "post_attention_norm_rms": self.post_rms},
                "multipliers": self.multipliers,
                "embed": self.embed,
                "layers": [{"heads": lp.heads, "mlp": lp.mlp, "attn_bias": lp.attn_bias, "attn_rest": lp.attn_rest}
                           for lp in self.layers],
                "other": self.other, "sum": self.total, "interventions": self.labels}


@dataclass
class Comparison:
    labels: tuple[str, str]
    pieces: tuple[list[str], list[str]]  # generated pieces of each branch
    first_diverging: int | None  # the first step whose tokens differ (None: the same as far as both go)
    tops: tuple[list[list[tuple[str, float]]], list[list[tuple[str, float]]]]  # per step: (piece, prob) top-k
    resid_diff: list[list[float]]  # [step][layer]: L2 norm of the difference of the last position's resid_post


@dataclass
class MemoryPart:
    label: str  # "weights", "KV cache", "activations kept for backward", "gradients", "Adam moments"
    bytes: int
    how: str  # "measured" (counted from the tensors) or "formula"
    note: str = ""


@dataclass
class TokenLosses:
    """A text teacher-forced: losses[t] is the cross-entropy (nats) of predicting token_ids[t + 1] from
    positions <= t; mean_loss their mean, perplexity exp(mean_loss)."""
    token_ids: list[int]
    pieces: list[str]
    losses: list[float]  # len(token_ids) - 1
    mean_loss: float
    perplexity: float

    def to_json(self) -> dict:
        return {"token_ids": self.token_ids, "losses": self.losses, "mean_loss": self.mean_loss,
                "perplexity": self.perplexity}


@dataclass
class TrainingStep:
    """One training step's forward and backward over a text (no weight is updated): the losses, the
    gradient's L2 norm per weight (HF parameter names) and per layer, and memory beside inference's."""
    losses: TokenLosses
    grad_norms: dict[str, float]  # parameter name -> L2 norm of d(mean loss)/d(weight)
    layer_norms: list[float]  # per block: the L2 norm of all its weights' gradients together
    inference_memory: list[MemoryPart]
    training_memory: list[MemoryPart]
    seconds_forward: float
    seconds_backward: float

    def weight_types(self) -> list[str]:
        """The per-layer weight names without their layer prefix, in model order ("self_attn.q_proj.weight", ...)."""
        seen: dict[str, None] = {}
        for name in self.grad_norms:
            parts = name.split(".")
            if "layers" in parts:
                seen.setdefault(".".join(parts[parts.index("layers") + 2:]), None)
        return list(seen)

    def to_json(self) -> dict:
        return {**self.losses.to_json(), "grad_norms": self.grad_norms, "layer_grad_norms": self.layer_norms,
                "memory": {side: [{"label": m.label, "bytes": m.bytes, "how": m.how} for m in parts]
                           for side, parts in (("inference", self.inference_memory),
                                               ("training_step", self.training_memory))}}
