"""Generation sessions over the engine, one layer above it: token ids in, records out.

- `session.Session`: the generation state machine (prefill, step, run ahead, branch, resample, finish).
- `trace_store.TraceStore`: one `Forward` per forward pass and the KV cache they wrote, kept in step.
- `analysis`: attention weights and the logit lens computed on demand from what a forward kept.
- `records`: the small numpy/plain-Python records the UI, CLI and viz read (no torch).
"""
