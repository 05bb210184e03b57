"""The devices a run can be put on, as the page's device picker offers them: cpu, and cuda / mps where this
machine has them (`inspector.engine.devices`, re-exported for the layers above the session)."""

from __future__ import annotations

from inspector.engine.devices import available_devices, resolve_device

__all__ = ["available_devices", "resolve_device"]
