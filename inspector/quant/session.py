"""`quantized_session(loaded, quant, kv_quant, **kw)`: a generation `Session` over a quantized model and/or
an int8 KV cache, for `inspector run --quant ... --kv-quant ...`.

`QuantSession` is the session layer's `Session` whose every new KV cache (each prefill, each recompute) is of
the loaded model's `kv` precision (`inspector.quant.kv_int8`); everything else is the plain session.
"""

from __future__ import annotations

from typing import Any

from inspector.engine.kv_cache import KVCache
from inspector.quant.kv_int8 import new_kv_cache
from inspector.quant.model import QuantLoadedModel, quantize_loaded
from inspector.session.session import Session


class QuantSession(Session):
    def new_cache(self) -> KVCache:
        """A KV cache of the loaded model's `kv` precision (int8, else the model's own dtype)."""
        if getattr(self.loaded, "kv", "fp32") == "int8":
            return new_kv_cache(self.model, "int8")
        return super().new_cache()


def quantized_session(loaded: Any, quant: str | None, kv_quant: str | None,
                      **session_kw: Any) -> tuple[QuantLoadedModel, QuantSession]:
    """(the quantized LoadedModel, a session over it); InputError on an unknown scheme or KV precision."""
    qloaded = quantize_loaded(loaded, quant, kv_quant)
    return qloaded, QuantSession(qloaded, **session_kw)
