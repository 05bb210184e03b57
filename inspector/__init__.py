"""Inference Inspector: an instrumented Llama-style inference engine, and a web page, a CLI and this Python
API to watch it work.

    import inspector
    model = inspector.load()                  # the embedded SmolLM2-135M-Instruct; or "gemma3-270m", a
                                              # directory, a GGUF file, a Hub id; dtype="fp32"|"bf16", device=
    run = model.prefill("Why is the sky blue?", chat=True, temperature=0.7, seed=3, max_new_tokens=32)
    run = model.prefill(ids=[1, 2, 3])        # or token ids, fed as given
    run.step(); run.step(5)                   # one decode step, five more; run.play() steps to the end
    run.prompt_ids, run.generated_ids, run.text, run.finished
    run.logits(0)                             # (vocab,) float32 of step 0 (the prefill's last position)
    run.logits(0, position="all")             # (positions, vocab); run.probs, run.logprobs, run.top(k, n=5)
    run.lens(2, token=t); run.commitment(2)   # the logit lens, computed when asked
    run.cache(["blocks.*.hook_resid_post"], step=0)   # {trace point: numpy (positions, ...)}
    model.prefill("...", hooks={"blocks.5.hook_resid_post": fn})  # fn(value, hook) -> None or a tensor
    run.residual_norms(0)                     # (layers + 1, positions of step 0)
    run.attention(3, step=0)                  # (query heads, queries, keys) of layer 3
    run.figure("attention", layer=3, head=1)  # the page's own figure (plotly)
    run.save("run.safetensors"); inspector.open_trace("run.safetensors", model)

Levers are `Model.prefill` keywords with `inspector run`'s flag names (ablate_head=(5, 3), ablate="mean",
repetition_penalty=1.3, quant="int8", speculative="ngram", policy="h2o", budget=64, ...); analyses are
`Model` methods with the CLI commands' results (attribute, patch, loss, kv_eval, quant, beam_search), drawn
by `inspector.figure(result)`. Every refusal raises `inspector.InputError` (a ValueError) with a one-line
message; a wrong type raises `inspector.InputTypeError`, an InputError that is a TypeError too. Steps,
layers, heads and positions are Python indices (negative from the end; numpy integers work).
Importing `inspector` imports neither torch, gradio nor plotly; plotly loads when a figure is drawn.

Two namespaces, never mixed: module paths (`model.layers.{i}.self_attn.q_proj`, the HF names used for
weights) and trace keys (`blocks.{i}.hook_resid_pre`, TransformerLens names used for recorded values).
"""

from __future__ import annotations

from typing import Any

from inspector.errors import InputError, InputTypeError

__version__ = "0.1.0"
__all__ = ["load", "open_trace", "figure", "InputError", "InputTypeError", "HookError", "Model", "Run",
           "SpeculativeRun", "Html"]

# name -> the module that defines it, imported on first use (PEP 562): `import inspector` stays light
_LAZY = {
    "load": "inspector.api.model",
    "Model": "inspector.api.model",
    "Run": "inspector.api.run",
    "open_trace": "inspector.api.traces",
    "SpeculativeRun": "inspector.api.speculative",
    "Html": "inspector.api.views",
    "figure": "inspector.api.lab_figures",
    "HookError": "inspector.api.hooks",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'inspector' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
