"""Analyses over the engine that change a run to explain it: activation patching, direct logit
attribution, and the comparison of two branches (what they return, plain data for the views: `findings`, and `head_findings`
for the head atlas)."""
