"""The session a `RunRequest` describes: `session_for(request, loaded, settings, record)`, what the page's
Prefill, the Python API's `Model.start` and (through it) `inspector run` each make their run with.

It lives in the quantization layer because that is the lowest layer that knows both sessions it may make
(the plain `Session` and `QuantSession`) and that both the page and the API may import. `RunRequest`
(`inspector.generation.request`, the run described once) is re-exported here, so the page, which reaches
nothing below the session layer, builds and checks the same description the CLI and the API do (with
its own `Naming`; `Checked`, `RequestError` and `decoding_fields` come with it). The session keeps the
request's JSON form (`session.request`): a trace file and every `--json` write it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inspector.generation.levers import Levers
from inspector.generation.request import VERSION, RunRequest
from inspector.generation.request_checks import Checked, Naming, RequestError, decoding_fields
from inspector.quant.session import quantized_session
from inspector.session.session import Session

if TYPE_CHECKING:
    from inspector.generation.settings import DecodingSettings
    from inspector.models.loader import LoadedModel

__all__ = ["VERSION", "Checked", "Naming", "RequestError", "RunRequest", "decoding_fields", "session_for"]


def session_for(request: RunRequest, loaded: LoadedModel, settings: DecodingSettings, record: bool,
                levers: Levers | None = None) -> Session:
    """The generation session of `request` over `loaded`, with its decoding settings: over a quantized copy of
    `loaded` (weights and/or KV cache) with quant / kv_quant, else over `loaded` with `levers` (default: the
    request's interventions). The logit lens is computed when asked (`Session.logit_lens`), not on every step."""
    if request.quant or request.kv_quant:  # weights and/or KV cache quantized in memory (inspector.quant)
        _, session = quantized_session(loaded, request.quant, request.kv_quant, recompute=request.no_cache,
                                       record=record, lens=False, on_context_full=request.on_context_full)
    else:
        if levers is None:
            spec = request.lever_spec(loaded.config)
            levers = Levers(interventions=spec.interventions(loaded.model, loaded.tokenizer.encode, ()))
        session = Session(loaded, recompute=request.no_cache, record=record, lens=False,
                          on_context_full=request.on_context_full, levers=levers)
    session.set_decoding(settings)
    session.request = request.to_json()
    return session
