"""`quantized_session(loaded, quant, kv_quant, **kw)`: a generation `Session` over a quantized model and/or
an int8 KV cache, for `inspector run --quant ... --kv-quant ...`.

`QuantSession` is the session layer's `Session` whose every fresh trace (each prefill) gets a KV cache of
the loaded model's `kv` precision (`inspector.quant.kv_int8`); everything else is the plain session.
"""

from __future__ import annotations

from typing import Any

from inspector.quant.kv_int8 import new_kv_cache
from inspector.quant.model import QuantLoadedModel, quantize_loaded
from inspector.session.session import Session


class QuantSession(Session):
    def _reset(self) -> None:
        super()._reset()
        if getattr(self.loaded, "kv", "fp32") == "int8":
            self.trace.cache = new_kv_cache(self.model, "int8")


def quantized_session(loaded: Any, quant: str | None, kv_quant: str | None,
                      **session_kw: Any) -> tuple[QuantLoadedModel, QuantSession]:
    """(the quantized LoadedModel, a session over it); InputError on an unknown scheme or KV precision."""
    qloaded = quantize_loaded(loaded, quant, kv_quant)
    return qloaded, QuantSession(qloaded, **session_kw)
