"""How far a KV-cache policy moves the model's predictions, teacher-forced on a text, against the full cache.

`forced_logits(model, ids, spec, prefill)` feeds the text's ids through the generation loop with the
policy active: one forward over the first `prefill` ids (a prompt), then one forward per further id (decode
steps), the policy evicting after every forward. Row j of its logits (n, V), n = len(ids) - prefill,
predicts ids[prefill + j]. The full-cache reference is the same function with `CacheSpec("full")`: the
same forwards in the same shapes, so a policy that evicts nothing gives bit-equal logits (KL exactly 0).

`compare(ref, forced, ids, prefill) -> dict` gives the numbers the papers report for every predicted token:
KL(p_full || p_policy) mean and 95th percentile, top-1 agreement, the perplexity of the text under both,
and the KV bytes each cache held at the end (kept entries only), with the wall time of each pass.

A spec's `policy` is an eviction policy of `inspector.generation.cache_policies` (full, window, sinks, h2o,
snapkv) or a quantized cache (int8, int4: `inspector.quant.kv_quant.KiviKVCache`, every entry kept).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from inspector.engine import steps
from inspector.engine.kv_cache import KVCache
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import loop
from inspector.generation.cache_policies import POLICIES, make_policy
from inspector.generation.levers import Levers
from inspector.quant.fidelity import kl_per_step
from inspector.quant.kv_quant import KiviKVCache

QUANT_POLICIES = {"int8": 8, "int4": 4}
EVICTION_POLICIES = POLICIES  # the policies a session can generate under (`CacheSpec.eviction_policy`)
ALL_POLICIES = POLICIES + tuple(QUANT_POLICIES)


@dataclass(frozen=True)
class CacheSpec:
    """A policy name, the positions each layer keeps (eviction policies), sinks, and the position
    convention of the window family (`rerotate`: StreamingLLM's contiguous positions)."""

    policy: str
    budget: int | None = None
    sinks: int = 4
    rerotate: bool = False

    def check(self) -> None:
        """InputError naming what is allowed, before any model work."""
        if self.policy not in ALL_POLICIES:
            raise InputError(f"unknown policy {self.policy!r}: the policies are {', '.join(ALL_POLICIES)}")
        if self.policy in QUANT_POLICIES:
            if self.rerotate:
                raise InputError("re-rotated positions apply to the window family (window, sinks)")
            return
        make_policy(self.policy, self.budget, self.sinks, self.rerotate)

    def eviction_policy(self) -> object:
        """A fresh policy object for one generation under this eviction spec (stateful policies start afresh);
        InputError for a quantized cache, which is a kind of cache rather than a policy."""
        if self.policy not in EVICTION_POLICIES:
            raise InputError(f"{self.policy} is a quantized cache, not an eviction policy: "
                             f"the eviction policies are {', '.join(EVICTION_POLICIES)}")
        return make_policy(self.policy, self.budget, self.sinks, self.rerotate)

    def levers_and_cache(self, model: Transformer) -> tuple[Levers, KVCache]:
        if self.policy in QUANT_POLICIES:
            return Levers(), KiviKVCache(model.config, QUANT_POLICIES[self.policy], device=model.inv_freq.device)
        return Levers(cache_policy=make_policy(self.policy, self.budget, self.sinks, self.rerotate)), steps.new_cache(model)


@dataclass
class ForcedPass:
    logits: torch.Tensor  # (n, V) fp32: row j predicts ids[prefill + j]
    seconds: float
    kv_bytes: int  # bytes of the entries the cache still reads at the end
    held: list[int]  # per layer, positions held (any KV head) at the end


@torch.inference_mode()
def forced_logits(model: Transformer, ids: list[int], spec: CacheSpec, prefill: int) -> ForcedPass:
    """Teacher-force `ids` with the spec's policy or cache (see the module docstring)."""
    if not 1 <= prefill < len(ids):
        raise InputError(f"prefill must be a whole number from 1 to {len(ids) - 1} (the text has {len(ids)} tokens)")
    levers, cache = spec.levers_and_cache(model)
    t0 = time.perf_counter()
    rows = list(loop.teacher_forced(model, cache, ids[:prefill], ids[prefill:-1], levers))
    seconds = time.perf_counter() - t0
    held = [len(cache.held_positions(layer)) for layer in range(cache.num_layers)]
    return ForcedPass(torch.stack(rows), seconds, cache.kept_nbytes, held)


def perplexity(logits: torch.Tensor, targets: list[int]) -> float:
    """exp(mean negative log-likelihood) of `targets` under (n, V) logits, in float64."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -logp[torch.arange(len(targets)), torch.tensor(targets)]
    return float(nll.mean().exp())


def compare(ref: ForcedPass, forced: ForcedPass, ids: list[int], prefill: int, spec: CacheSpec) -> dict:
    """The `inspector kv-eval --json` object (keys in the command's documentation)."""
    targets = ids[prefill:]
    kl = kl_per_step(ref.logits, forced.logits)
    agree = (ref.logits.argmax(-1) == forced.logits.argmax(-1)).double()
    return {
        "policy": spec.policy,
        "budget": spec.budget if spec.policy not in ("full", *QUANT_POLICIES) else None,
        "sinks": spec.sinks if spec.policy == "sinks" else 0,
        "positions": "contiguous" if spec.rerotate else "original",
        "tokens": len(ids),
        "prefill": prefill,
        "scored": len(targets),
        "kl_mean": float(kl.mean()),
        "kl_p95": float(torch.quantile(kl, 0.95)),
        "top1_agreement": float(agree.mean()),
        "ppl": perplexity(forced.logits, targets),
        "ppl_full": perplexity(ref.logits, targets),
        "kv_bytes": forced.kv_bytes,
        "kv_bytes_full": ref.kv_bytes,
        "seconds": forced.seconds,
        "seconds_full": ref.seconds,
    }


def evaluate(model: Transformer, ids: list[int], spec: CacheSpec, prefill: int,
             ref: ForcedPass | None = None) -> tuple[dict, ForcedPass]:
    """(the comparison of `spec` against the full cache, the full-cache pass, reusable for other specs)."""
    spec.check()
    if ref is None:
        ref = forced_logits(model, ids, CacheSpec("full"), prefill)
    return compare(ref, forced_logits(model, ids, spec, prefill), ids, prefill, spec), ref
