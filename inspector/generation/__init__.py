"""The one generation loop: `Sequence` (ids, text, finish reason), `loop` (forward -> processors ->
sample -> append), and its three levers (`levers`: logits processors, a KV-cache policy, interventions).
On top of it: `settings` (DecodingSettings: penalties, bans, stop strings, constraint, beams) and
`decoding` (the processors they give), `constraints` (grammar masks), `beam` (beam search) and `records`
(the beam tree the views read)."""
