"""The inference engine: plain PyTorch, token ids in, logits and trace points out; it knows no text.

A forward, top-down in the order the data flows:
- `steps`: `run`, the one forward (prefill, decode_step, step_rows, recompute are its named uses); it
  advances the caller's KV cache once, by the positions the forward added.
- `model`: Transformer: embeddings, the blocks, the final norm and LM head; several rows at their own positions.
- `layers`: what a dense block runs, in order: Block (the residual stream), RMSNorm, RoPE, Attention, MLP.
- `moe`: the sparse mixture-of-experts MLP a mixture's blocks run instead of the MLP.
- `arch`: which layers each model family's blocks are built from.
- `scores`: attention's math: scores scaled, masked and softmaxed (model and views), the masks of a forward.
- `flash`: the same attention by tiles of keys with the online softmax (the tiled kind).
- `linear`: the model's Linear, the weight products (`project`) and the stacked q/k/v and gate/up layout.
- `kv_cache`: KVCache, owned by the caller (per-row lengths, read, truncate, measured bytes).
- `trace` / `recording`: the trace-point names and the recorders that keep what the views need.
Around it:
- `config`: ModelConfig (Hugging Face config keys), SamplingParams.
- `processors` / `penalties` / `sampling`: the logits processors and the pure draw.
- `devices`: where the model runs; `optiming`: per-operation timing of one forward; `memory`: glibc's mmap
  threshold, so long prompts' buffers go back to the OS.
"""
