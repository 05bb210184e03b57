"""The Python API (`import inspector`): load a model, prefill and step runs from text or token ids, read what
every forward recorded, compute what it did not keep when asked (the lens, other positions' logits, an
activation cache), hook trace points, draw the page's views, save and open trace files, run the CLI's
analyses.

`model.py` (load, Model, the levers as keywords), `run.py` (Run), `readings.py` (logits, probabilities, top
tokens, the lens, the commitment layer), `activations.py` (`run.cache`), `hooks.py` (hooks and trace-point
names), `args.py` (indices, types, the refusal rule), `lever_keywords.py` (heads and layers in Python's
forms), `views.py` (the page's builders), `speculative.py`, `analyses.py` (the analyses as methods, which the
CLI's commands call; over `measures.py`, their computations), `traces.py` (open_trace),
`lab_figures.py` (analysis results drawn). A run is described once, as a `RunRequest`
(`inspector.generation.request`), which the keywords and the CLI's flags both build.
`inspector/__init__.py` exports the names lazily.
"""
