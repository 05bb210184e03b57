"""The one generation loop: `Sequence` (ids, text, finish reason), `loop` (forward -> processors ->
sample -> append), and its three levers (`levers`: logits processors, a KV-cache policy, interventions)."""
