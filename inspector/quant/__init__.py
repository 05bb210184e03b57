"""Weight-only quantization of a loaded model (bf16, int8 per channel, int4 group-wise), an int8 KV cache,
and its fidelity against the fp32 model, teacher-forced on the same tokens."""
