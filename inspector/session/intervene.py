"""A running session under other levers: the run again from its prompt (an intervention branch), and the
replay of a branch whose levers differ from the session's.

An intervention applies to the whole run, prompt included (as `inspector run --ablate-head` and a
`--no-cache` run under it), so its branch is comparable with "as is" from the first token on, and a
cached branch equals its own full recompute. `rerun(session, levers)` runs the prompt again under
`levers` and steps as far as the run had gone (fewer when it finishes sooner), with the newest step's
sampling settings. `use_cache_policy` and `levers_with` give the session other levers. `replay(session, levers, generated_ids)` makes the session hold a branch: when the
levers are the session's, `Session.follow` replays only the steps the branches do not share; otherwise the
prompt runs again under the branch's levers and every token of the branch is forced in turn.
"""

from __future__ import annotations

from dataclasses import replace

from inspector.errors import InputError
from inspector.generation.levers import Levers
from inspector.session.session import Session


def _params(session: Session):
    if not session.records or session.records[-1].sample is None:
        raise InputError("nothing to run again: run prefill first")
    return session.records[-1].sample.params


def rerun(session: Session, levers: Levers, n_tokens: int | None = None) -> None:
    """The session's prompt again under `levers`, for as many tokens as it holds now (or `n_tokens`)."""
    params = _params(session)
    n = len(session.generated_ids) if n_tokens is None else n_tokens
    session.set_levers(levers)
    session.prefill_ids(list(session.prompt_ids), params, max_new_tokens=session.max_new_tokens)
    while len(session.generated_ids) < n and not session.finished:
        session.step(params)


def replay(session: Session, levers: Levers | None, generated_ids: list[int]) -> None:
    """Make the session hold the branch `generated_ids` generated under `levers` (None: no levers; see the
    module docstring)."""
    levers = Levers() if levers is None else levers
    if levers != session.own_levers:
        params = _params(session)
        session.set_levers(levers)
        session.prefill_ids(list(session.prompt_ids), params, max_new_tokens=session.max_new_tokens)
    session.follow(generated_ids)


def use_cache_policy(session: Session, policy: object) -> None:
    """Generate under the KV-cache `policy` from the next forward on (`CacheSpec.eviction_policy()`), the
    session's other levers kept."""
    session.set_levers(replace(session.own_levers, cache_policy=policy))


def levers_with(session: Session, interventions: tuple) -> Levers:
    """The session's own levers with `interventions` added after its own (an intervention branch's levers)."""
    own = session.own_levers
    return replace(own, interventions=own.interventions + tuple(interventions))


POINTS = ("head", "attn_out", "mlp_out", "block", "steer")  # what `interventions_for` changes


def interventions_for(loaded: object, session: Session, point: str, op: str, layer: object, head: object,
                      factor: object, query: object, key: object, towards: str, away: str, alpha: object) -> tuple:
    """The interventions the page's Apply controls describe, for the session's run (InputError naming what is
    allowed): a head's output (`op` zero, scale by `factor`, or its mean over the run's prompt), a whole
    attention or MLP output, attention blocked from position `query` to `key`, or steering at resid_pre by
    `alpha` times the difference of the `towards` and `away` prompts' residuals."""
    from inspector.generation import interventions as ivs

    cfg, tok = loaded.config, loaded.tokenizer
    if point == "head":
        mean = ivs.head_mean(loaded.model, session.prompt_ids, layer, head, session.levers) if op == "mean" else None
        return ivs.head(cfg, layer, head, op, factor=factor, mean=mean)
    if point in ("attn_out", "mlp_out"):
        return ivs.component(cfg, point, layer, op, factor=factor)
    if point == "block":
        return ivs.block_attention(cfg, query, key, layer)
    if point == "steer":
        t, a = str(towards or "").strip(), str(away or "").strip()
        if not t or not a:
            raise InputError("steering needs two non-empty prompts: fill 'towards' and 'away'")
        vec = ivs.steering_vector(loaded.model, tok.encode(t), tok.encode(a), layer, session.levers)
        return ivs.steer(cfg, layer, vec, alpha)
    raise InputError(f"unknown point {point!r}: use one of {', '.join(POINTS)}")


def check_layer(config: object, layer: object) -> int:
    """`layer` as a layer index of the model (InputError naming the range)."""
    from inspector.generation.interventions import check_layer as check

    return check(config, layer)
