"""The model's building blocks, one module per concept (as nano-vllm's `layers/`): the families in
`inspector.engine.arch` import them and `inspector.engine.model` imports the families, never the other way
round.

- `linear`: `Linear` (products through `inspector.engine.linear.project`) and `NoHooks`.
- `norm`: RMSNorm and Gemma's (1 + w) RMSNorm.
- `attention`: grouped-query attention with RoPE (standard or tiled), its q/k-norm variant and the one
  scaled by the config's own score scale.
- `mlp`: the gated MLPs (SwiGLU, GELU-tanh).
- `moe`: the sparse mixture-of-experts MLP (router, top-k, the chosen experts), in each family's layout.
- `block`: decoder blocks (Llama's, one over a family's parts, Gemma's sandwich, Granite's scaled residual).
Rotary embeddings are functions in `inspector.engine.rope` (the generation loop re-rotates cached keys
with them too); masks and attention weights are in `inspector.engine.attention`.
"""
