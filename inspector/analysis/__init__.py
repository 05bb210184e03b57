"""Analyses over the engine that change a run to explain it: activation patching, direct logit
attribution, and the comparison of two branches (records for the views in `records`)."""
