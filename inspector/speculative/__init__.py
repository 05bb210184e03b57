"""Speculative decoding over the engine: drafters propose, the full model verifies k drafts in one forward.

`drafters` (the Drafter interface, prompt lookup, early exit), `verify` (the acceptance rule, the verify
forward, the cache rollback), `decoding` (`SpeculativeDecoder`, the round loop) and `rounds` (plain
dataclasses per round, read by `inspector.viz.speculative`).
"""
