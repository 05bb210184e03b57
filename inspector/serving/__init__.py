"""Serving: what it takes to run a model for many requests. `memory`: the memory calculator (no torch)."""
