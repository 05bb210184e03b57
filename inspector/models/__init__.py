"""Where a model comes from: sources (the embedded GGUF, a local directory, the Hub), GGUF conversion,
safetensors loading, the tokenizer and incremental detokenizer, and the tensor inventory."""
