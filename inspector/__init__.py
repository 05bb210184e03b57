"""Inference Inspector: an instrumented Llama-style inference engine and a web app to watch it work.

Two namespaces, never mixed: module paths (`model.layers.{i}.self_attn.q_proj`, the HF names used for
weights) and trace keys (`blocks.{i}.hook_resid_pre`, TransformerLens names used for recorded values).
"""

__version__ = "0.1.0"
