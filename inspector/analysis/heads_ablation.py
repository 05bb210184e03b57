"""The causal check of the head atlas: ablate heads with the interventions lever and see what breaks.

Every ablation zeroes a head's output (`inspector.generation.interventions.head(cfg, L, h, "zero")`, the
lever the page's Interventions lab uses), in every forward of the run it applies to.

- `probe_losses(model, probe, levers)`: teacher-forced cross-entropy (nats) on the probe under `levers`,
  split by copy. With p prefix tokens, the first copy's loss is the mean over predicting positions
  p+1 .. p+n-1 (its tokens 2..n, each from the tokens before it), the repeated copy's over p+n+1 .. p+2n-1
  (its tokens 2..n: each one followed the same earlier token in the first copy, so a model that copies
  from context can predict it). Both are n-1 predictions per sequence, averaged over the K sequences.
  The first copy's tokens are random: nothing before them predicts them. A model with working induction
  heads predicts the repeated copy far better than the first.
- `ablation(model, atlas, role, k, seed)`: those losses with no head off, with the atlas's top-k heads of
  `role` off, and with k heads drawn at random (numpy PCG64, `seed`) from the heads not in that top-k.
- `ablate_in_run(session, heads, label, before)`: the session's run made again from its prompt with `heads`
  off on top of its own levers (`inspector.session.intervene.rerun`), so the session then holds that run as
  a normal branch of it; returns (`RunAblation`: the newest step's next-token distribution before and
  after, the levers of the new branch) for the page to add to its branch tree. `before` (`run_before`,
  taken earlier): the run as it was then is the one compared and built on, so two ablations of one run
  (the top-k heads, then k random heads) each start from it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from inspector.analysis.head_findings import ROLE_NAMES, AblationRow, HeadAblation, HeadAtlas, Probe, RunAblation
from inspector.analysis.heads import check_role
from inspector.engine import steps
from inspector.engine.config import ModelConfig
from inspector.engine.model import Transformer
from inspector.errors import InputError
from inspector.generation import interventions as ivs
from inspector.generation import loop
from inspector.generation.levers import Intervention, Levers
from inspector.session.intervene import rerun
from inspector.session.session import Session
from inspector.validate import SEED, Bound

LOGIT_BUDGET = 512 * 2**20  # bytes of fp32 logits (rows, T, V) per forward
TOP = 8  # tokens shown per distribution of a run's ablation
Head = tuple[int, int]


def head_ablations(cfg: ModelConfig, heads: Sequence[Head]) -> tuple[Intervention, ...]:
    """Each head of `heads` zeroed, as interventions (checked against the model)."""
    return tuple(iv for L, h in heads for iv in ivs.head(cfg, L, h, "zero"))


def check_k(cfg: ModelConfig, k: object) -> int:
    """k as a whole number from 1 to the model's number of heads, and at most half of them so that k random
    heads outside the top k exist (InputError otherwise)."""
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    k = int(Bound("top-k", True, 1, L * H, note=f"(the model's {L} layers x {H} heads)").parse(k))
    if 2 * k > L * H:
        raise InputError(f"top-k {k} leaves {L * H - k} other heads, too few for a random set of {k}: use a "
                         f"top-k of at most {L * H // 2}")
    return k


@torch.inference_mode()
def probe_losses(model: Transformer, probe: Probe, levers: Levers = loop.NO_LEVERS) -> tuple[float, float]:
    """(first copy's mean loss, repeated copy's mean loss) in nats on `probe` under `levers` (see the module doc)."""
    T, V, p, n = probe.length, model.config.vocab_size, len(probe.prefix), probe.n
    rows = max(1, LOGIT_BUDGET // (T * V * 4))
    first, repeat = [], []
    for b0 in range(0, probe.count, rows):
        chunk = probe.ids[b0:b0 + rows]  # (B, T)
        logits = loop.forward(model, steps.new_cache(model, len(chunk)), chunk.tolist(), levers,
                              all_positions=True)  # (B, T, V)
        target = torch.as_tensor(chunk[:, 1:], device=logits.device)  # (B, T-1): position t predicts t+1
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, V), target.reshape(-1), reduction="none")
        nll = nll.view(len(chunk), T - 1).double().cpu()  # entry t: predicting position t+1
        first.append(nll[:, p:p + n - 1])  # predicting p+1 .. p+n-1
        repeat.append(nll[:, p + n:p + 2 * n - 1])  # predicting p+n+1 .. p+2n-1
    return float(torch.cat(first).mean()), float(torch.cat(repeat).mean())


def random_heads(cfg: ModelConfig, exclude: Sequence[Head], k: int, seed: int) -> list[Head]:
    """k heads drawn without replacement (numpy PCG64, `seed`) from those not in `exclude`, in draw order."""
    skip = set(exclude)
    pool = [(L, h) for L in range(cfg.num_hidden_layers) for h in range(cfg.num_attention_heads) if (L, h) not in skip]
    if k > len(pool):
        raise InputError(f"{k} random heads from the {len(pool)} not excluded: too few")
    picks = np.random.default_rng(seed).choice(len(pool), size=k, replace=False)
    return [pool[int(i)] for i in picks]


def ablation(model: Transformer, atlas: HeadAtlas, role: str = "induction", k: object = 5,
             seed: object = 0) -> HeadAblation:
    """The probe's losses by copy: no head off, the top-k `role` heads off, k random other heads off."""
    cfg = model.config
    role, k, seed = check_role(role), check_k(cfg, k), int(SEED.parse(seed))
    top = [(L, h) for L, h, _ in atlas.top(role, k)]
    rand = random_heads(cfg, top, k, seed)
    t0 = time.perf_counter()
    rows = []
    for label, heads in (("none", []), (f"top {k} {ROLE_NAMES[role]} heads", top), (f"{k} random heads", rand)):
        first, repeat = probe_losses(model, atlas.probe, Levers(interventions=head_ablations(cfg, heads)))
        rows.append(AblationRow(label, heads, first, repeat))
    return HeadAblation(role, k, seed, rows, time.perf_counter() - t0)


@dataclass(frozen=True)
class RunBefore:
    """A session's run as it was: its tokens, its newest step and that step's distribution, its levers."""

    generated_ids: list[int]
    step: int
    probs: torch.Tensor  # (V,) softmax of the newest step's raw logits
    levers: Levers  # the session's own (`Session.own_levers`)


def run_before(session: Session) -> RunBefore:
    """The session's run now, to ablate heads in (InputError before a prefill)."""
    if not session.records or session.records[-1].sample is None:
        raise InputError("nothing to ablate in yet: run prefill first")
    step, probs = _newest(session)
    return RunBefore(list(session.generated_ids), step, probs, session.own_levers)


def _newest(session: Session) -> tuple[int, torch.Tensor]:
    """(the newest step, softmax of its raw logits (V,))."""
    forward = session.trace.forwards[-1]
    return len(session.records) - 1, torch.softmax(forward.logits.float(), dim=-1)


def _top(session: Session, probs: torch.Tensor) -> list[tuple[str, float]]:
    p, ids = torch.topk(probs, min(TOP, probs.numel()))
    return [(session.tokenizer.piece(int(i)), float(v)) for v, i in zip(p, ids)]


def ablate_in_run(session: Session, heads: Sequence[Head], label: str = "",
                  before: RunBefore | None = None) -> tuple[RunAblation, Levers]:
    """The session's run made again with `heads` off (see the module docstring): (its record, its levers)."""
    if not heads:
        raise InputError("no heads to ablate: pick at least one")
    was = run_before(session) if before is None else before
    new = head_ablations(session.config, heads)
    label = label or "heads " + ", ".join(f"{L}.{h}" for L, h in heads) + " off"
    token = was.generated_ids[was.step]
    levers = replace(was.levers, interventions=was.levers.interventions + new)
    rerun(session, levers, len(was.generated_ids))
    step_after, probs_after = _newest(session)
    after_ids = list(session.generated_ids)
    first = next((i for i, (a, b) in enumerate(zip(was.generated_ids, after_ids)) if a != b), None)
    record = RunAblation(label, [tuple(h) for h in heads], was.step, step_after, _top(session, was.probs),
                         _top(session, probs_after), session.tokenizer.piece(token), float(was.probs[token]),
                         float(probs_after[token]), first, session.tokenizer.pieces(after_ids))
    return record, levers
