"""The inference engine: plain PyTorch, token ids in, logits and trace points out; it knows no text.

- `config`: ModelConfig (Hugging Face config keys), SamplingParams.
- `layers`: the building blocks (norms, attention, MLPs, mixtures of experts, decoder blocks), imported by `arch`.
- `arch`: which blocks each model family is built from.
- `model`: embeddings, the blocks, the final norm and LM head (Transformer); several rows at their own positions.
- `rope`: rotary position embeddings (functions the layers and the generation loop share).
- `linear`: the weight products (`project`) and the stacked q/k/v and gate/up layout they run on.
- `attention`: the one place scores are scaled, causally masked and softmaxed (model and views).
- `kv_cache`: KVCache, owned by the caller (per-row lengths, read, truncate, measured bytes).
- `steps`: prefill, decode_step, step_rows, recompute: one forward each, advancing the cache once.
- `trace` / `recording`: the trace-point names and the recorders that keep what the views need.
- `sampling`: pure functions (temperature, top-k, top-p, min-p, sample).
- `memory`: glibc's mmap threshold, so long prompts' buffers go back to the OS.
"""
