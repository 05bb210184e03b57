"""One sequence's generation and its levers: `Sequence` (ids, text, finish reason; `finish`: the reasons), `loop` (what every
decoding path shares: `forward`, how the product runs the model, with the levers; `choose`, the
draw of a token into a `Sequence`; and small one-sequence drivers on the two), and its three levers
(`levers`: logits processors, a KV-cache policy from `cache_policies`, interventions). The loops that repeat
a step live with what they do between forwards (the session, speculative decoding, the serving scheduler,
`beam`; the README's "Where a step happens"). On top of it: `settings` (DecodingSettings: penalties, bans,
stop strings, constraint, beams) and `decoding` (the processors they give), `constraints` (grammar masks),
`beam` (beam search) and `beam_tree` (the beam tree the views read)."""
